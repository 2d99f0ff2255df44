"""What the NoneBot store checks before it lists the plugin, done the same way.

The store's plugin test (nonebot/noneflow, ``src/providers/docker_test``) installs the package
in a fresh project whose ``.env`` says ``DRIVER=fake`` (a driver with every mixin and no
implementation), runs ``init()`` and ``load_plugin(module_name)``, writes the metadata's
``name``, ``description``, ``usage``, ``type``, ``homepage`` and ``supported_adapters`` to
``metadata.json`` and fails when ``metadata.config`` is not a pydantic ``BaseModel``. Its
publication check (``src/providers/validation``) then wants: a name of at most 50 characters,
``type`` ``application`` or ``library``, a ``homepage`` matching ``^https?://.*$``, and
``supported_adapters`` (``~`` read as ``nonebot.adapters.``) among the store's adapters; the
package ``nonebot-plugin-*``, its module ``nonebot_plugin_*``.

``test_store_plugin_test`` runs the same steps in a fresh interpreter, with no ``AUTO_ASSIGN_*``
setting and no service.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parent.parent
MODULE = "nonebot_plugin_auto_assign"
HOMEPAGE = "https://github.com/auto-assign/auto-assign/tree/main/integrations/nonebot"

NAME_MAX_LENGTH = 50
PLUGIN_VALID_TYPE = ("application", "library")
STORE_ADAPTERS = {"nonebot.adapters.onebot.v11"}
"""The adapters this plugin names, as the store lists them (its ``adapters.json``
``module_name``)."""

FAKE_DRIVER = '''\
from nonebot import logger
from nonebot.drivers import ASGIMixin, HTTPClientMixin, WebSocketClientMixin
from nonebot.drivers import Driver as BaseDriver


class Driver(BaseDriver, ASGIMixin, HTTPClientMixin, WebSocketClientMixin):
    """Every mixin, nothing implemented: what the store's plugin test loads plugins with."""

    @property
    def type(self):
        return "fake"

    @property
    def logger(self):
        return logger

    def run(self, *args, **kwargs):
        super().run(*args, **kwargs)

    @property
    def server_app(self):
        return None

    @property
    def asgi(self):
        raise NotImplementedError

    def setup_http_server(self, setup):
        raise NotImplementedError

    def setup_websocket_server(self, setup):
        raise NotImplementedError

    async def request(self, setup):
        raise NotImplementedError

    async def stream_request(self, setup, *, chunk_size=1024):
        raise NotImplementedError

    def get_session(self, *args, **kwargs):
        raise NotImplementedError

    async def websocket(self, setup):
        raise NotImplementedError
'''

RUNNER = '''\
import json
import sys

from nonebot import init, load_plugin, require
from pydantic import BaseModel

init()
plugin = load_plugin(sys.argv[1])
if not plugin:
    sys.exit(1)
if plugin.metadata:
    meta = plugin.metadata
    with open("metadata.json", "w", encoding="utf-8") as f:
        json.dump(
            {
                "name": meta.name,
                "desc": meta.description,
                "usage": meta.usage,
                "type": meta.type,
                "homepage": meta.homepage,
                "supported_adapters": sorted(meta.supported_adapters)
                if meta.supported_adapters is not None
                else None,
                "config": meta.config.__name__ if meta.config else None,
            },
            f,
        )
    if meta.config and not issubclass(meta.config, BaseModel):
        print("the plugin's config is not a pydantic BaseModel")
        sys.exit(1)
# As the store then requires the plugins it depends on; require() of a loaded plugin gives it.
assert require(sys.argv[1]) is plugin.module
'''


def resolve_adapter_name(name: str) -> str:
    return "nonebot.adapters." + name[1:] if name.startswith("~") else name


def check_store_rules(meta: dict[str, Any]) -> None:
    assert isinstance(meta["name"], str) and 0 < len(meta["name"]) <= NAME_MAX_LENGTH, meta["name"]
    assert isinstance(meta["desc"], str) and meta["desc"].strip()
    assert isinstance(meta["usage"], str) and meta["usage"].strip()
    assert meta["type"] in PLUGIN_VALID_TYPE
    assert re.fullmatch(r"^https?://.*$", meta["homepage"].strip())
    adapters = meta["supported_adapters"]
    assert isinstance(adapters, list) and adapters
    resolved = {resolve_adapter_name(a) for a in adapters}
    assert resolved <= STORE_ADAPTERS, resolved
    for module in resolved:
        assert importlib.util.find_spec(module) is not None, module


def test_store_plugin_test(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("DRIVER=fake\n")
    (tmp_path / "fake.py").write_text(FAKE_DRIVER)
    (tmp_path / "runner.py").write_text(RUNNER)
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("AUTO_ASSIGN", "ENVIRONMENT"))}
    env.pop("AUTO_ASSIGN_BIN", None)
    result = subprocess.run(
        [sys.executable, "runner.py", MODULE],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert f'Succeeded to load plugin "{MODULE}"' in output, output
    meta = json.loads((tmp_path / "metadata.json").read_text(encoding="utf-8"))
    check_store_rules(meta)
    assert meta["type"] == "application"
    assert meta["homepage"] == HOMEPAGE
    assert meta["supported_adapters"] == ["~onebot.v11"]
    assert meta["config"] == "Config"
    # The usage lists the commands, in Chinese first, then in English.
    usage = meta["usage"]
    zh, en = usage.index("/aa explain [群号]"), usage.index("/aa explain [group]")
    assert zh < en
    for sub in ("status", "rebalance", "help"):
        assert f"/aa {sub}" in usage


def test_metadata_in_this_process() -> None:
    import nonebot
    from nonebot.adapters.onebot.v11 import Adapter
    from pydantic import BaseModel

    import nonebot_plugin_auto_assign as module

    plugin = nonebot.get_plugin(MODULE)
    assert plugin is not None and plugin.module is module
    assert nonebot.require(MODULE) is module
    meta = module.__plugin_meta__
    assert isinstance(meta, nonebot.plugin.PluginMetadata)
    assert plugin.metadata is meta
    assert meta.config is module.Config and issubclass(meta.config, BaseModel)
    assert meta.get_supported_adapters() == {Adapter}
    check_store_rules(
        {
            "name": meta.name,
            "desc": meta.description,
            "usage": meta.usage,
            "type": meta.type,
            "homepage": meta.homepage,
            "supported_adapters": sorted(meta.supported_adapters or ()),
        }
    )


def test_package_metadata() -> None:
    """pyproject.toml: the store's naming, an unpinned nonebot2, links and authors."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    project = tomllib.loads((PACKAGE / "pyproject.toml").read_text())["project"]
    assert project["name"].startswith("nonebot-plugin-")
    assert project["name"].replace("-", "_") == MODULE
    nonebot2 = [d for d in project["dependencies"] if re.match(r"nonebot2\b", d)]
    assert nonebot2 and "==" not in nonebot2[0]
    assert project["urls"] == {
        "Homepage": HOMEPAGE,
        "Repository": "https://github.com/auto-assign/auto-assign",
        "Issues": "https://github.com/auto-assign/auto-assign/issues",
    }
    assert project["authors"] == [{"name": "auto-assign maintainers"}]
    assert project["readme"] == "README.md"
