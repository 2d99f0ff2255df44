"""Configuration through NoneBot's .env and the plugin's metadata."""

from __future__ import annotations

from .service import TOKEN, Service


async def test_config_comes_from_env_file_and_init(service: Service) -> None:
    from nonebot.adapters.onebot.v11 import Adapter

    import nonebot_plugin_auto_assign as plugin

    # tests/.env.test
    assert plugin.config.auto_assign_token == TOKEN
    assert plugin.config.auto_assign_reporter == "nonebug"
    assert plugin.runtime.reporter.name == "nonebug"
    # nonebot.init keyword arguments (conftest) and the driver's config (the service's URL)
    assert plugin.config.auto_assign_heartbeat_interval == 1.0
    assert plugin.config.auto_assign_message_report_interval == 0.2
    assert plugin.config.auto_assign_url == service.url
    # defaults
    assert plugin.config.auto_assign_gate == "all"
    assert plugin.config.auto_assign_platform == "onebot"
    meta = plugin.__plugin_meta__
    assert meta.config is plugin.Config
    assert meta.get_supported_adapters() == {Adapter}


async def test_config_model_reads_env_style_values() -> None:
    from nonebot.compat import type_validate_python

    from nonebot_plugin_auto_assign import Config

    c = type_validate_python(
        Config,
        {"auto_assign_when_unreachable": "silent", "auto_assign_timeout": "1.5", "auto_assign_enabled": "false"}
    )
    assert (c.auto_assign_when_unreachable, c.auto_assign_timeout, c.auto_assign_enabled) == ("silent", 1.5, False)
    assert c.auto_assign_message_report_interval == 10.0  # the default
    off = type_validate_python(Config, {"auto_assign_message_report_interval": "0"})
    assert off.auto_assign_message_report_interval == 0.0


async def test_default_reporter_name(monkeypatch: object) -> None:
    """Without AUTO_ASSIGN_REPORTER: stable per bot project, key-safe (as the Koishi plugin's)."""
    import re

    import nonebot_plugin_auto_assign as plugin

    original = plugin.config.auto_assign_reporter
    plugin.config.auto_assign_reporter = ""
    try:
        name = plugin.reporter_name()
        assert re.fullmatch(r"nonebot-[A-Za-z0-9_.-]+-[0-9a-f]{8}", name), name
        assert plugin.reporter_name() == name
        plugin.config.auto_assign_reporter = "bad name/è"
        assert plugin.reporter_name() == "bad-name--"
    finally:
        plugin.config.auto_assign_reporter = original
