"""nonebug + the real auto-assign service.

The service binary runs as a child process (``tests/service.py``) for the whole session; NoneBot
runs in the session's event loop with the ``~none`` driver, the OneBot v11 adapter, this plugin
and a recording test plugin (``tests/plugins/record.py``).
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import nonebot
import pytest
from nonebug import NONEBOT_INIT_KWARGS

from .helpers import reset_roster, wait_until
from .service import Service, binary

HERE = Path(__file__).parent
SERVICE = Service(exclude=["onebot:12"])


def pytest_configure(config: pytest.Config) -> None:
    if not binary().is_file():
        pytest.exit(
            f"auto-assign binary not found at {binary()}: build it (cd ../.. && cargo build "
            "--release) or set AUTO_ASSIGN_BIN",
            returncode=2,
        )
    # nonebot.init(**kwargs) by nonebug's session fixture; these override .env.test.
    config.stash[NONEBOT_INIT_KWARGS] = {
        "driver": "~none",
        "_env_file": (str(HERE / ".env.test"),),  # a tuple: only this file
        "command_start": {"/"},
        "command_sep": {"."},
        "superusers": {"4242"},  # SUPERUSER: may use the changing commands (test_commands.py)
        "log_level": "INFO",
        # Fast recovery for the restart test.
        "auto_assign_heartbeat_interval": 1.0,
        "auto_assign_reconnect_max": 0.5,
        "auto_assign_retry_after": 0.5,
        "auto_assign_timeout": 2.0,
        # Message counts reach the service's weights within a fraction of a second.
        "auto_assign_message_report_interval": 0.2,
    }


@pytest.fixture(scope="session", autouse=True)
async def after_nonebot_init(after_nonebot_init: None) -> AsyncIterator[None]:
    """After nonebot.init, before the lifespan starts (on_startup)."""
    from nonebot.adapters.onebot.v11 import Adapter

    SERVICE.start()
    driver = nonebot.get_driver()
    driver.config.auto_assign_url = SERVICE.url  # type: ignore[attr-defined]
    driver.register_adapter(Adapter)
    nonebot.load_plugin("nonebot_plugin_auto_assign")
    nonebot.load_plugin("tests.plugins.record")
    yield
    SERVICE.stop()
    shutil.rmtree(SERVICE.dir, ignore_errors=True)


@pytest.fixture
def service() -> Service:
    return SERVICE


@pytest.fixture(autouse=True)
async def _each_test(service: Service) -> AsyncIterator[None]:
    from nonebot_plugin_auto_assign import config, runtime

    from .plugins.record import HANDLED

    if not service.running:
        service.start()
    await service.clear_overrides()
    reset_roster()
    HANDLED.clear()
    await wait_until(lambda: runtime.state.connected, what="the plugin follows the stream")
    # Settings tests change at run time, restored after each test.
    saved = {
        key: getattr(config, key)
        for key in (
            "auto_assign_when_unreachable",
            "auto_assign_language",
            "auto_assign_read_permission",
            "auto_assign_gate",
            "auto_assign_enabled",
        )
    }
    yield
    for key, value in saved.items():
        setattr(config, key, value)
    # Pins, holds and drains a test made end with it (test_operator.py).
    if service.running:
        await service.clear_overrides()
    # nonebug disconnects a context's bots at its exit; the hooks run in the background.
    await wait_until(lambda: not nonebot.get_bots(), what="bots disconnected")
    await wait_until(lambda: runtime.hooks_running == 0, what="bot hooks finished")
    # An escaped pytest.fail (a BaseException) in a hook would cancel NoneBot's lifespan task
    # group, and with it the plugin's background tasks, without failing the test.
    assert not nonebot.get_driver().task_group.cancel_scope.cancel_called
