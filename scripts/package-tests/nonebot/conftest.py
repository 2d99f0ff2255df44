"""nonebug with the NoneBot plugin installed from its wheel, against the packaged service.

AUTO_ASSIGN_URL and AUTO_ASSIGN_TOKEN name the service (scripts/test-packages.sh starts it).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import nonebot
import pytest
from nonebug import NONEBOT_INIT_KWARGS


def pytest_configure(config: pytest.Config) -> None:
    config.stash[NONEBOT_INIT_KWARGS] = {
        "driver": "~none",
        "_env_file": (),  # no .env: everything is here
        "command_start": {"/"},
        "log_level": "INFO",
        "auto_assign_url": os.environ["AUTO_ASSIGN_URL"],
        "auto_assign_token": os.environ["AUTO_ASSIGN_TOKEN"],
        "auto_assign_reporter": "nonebot-package-test",
        "auto_assign_heartbeat_interval": 1.0,
    }


@pytest.fixture(scope="session", autouse=True)
async def after_nonebot_init(after_nonebot_init: None) -> AsyncIterator[None]:
    """After nonebot.init, before the lifespan (the plugin's background tasks) starts."""
    from nonebot.adapters.onebot.v11 import Adapter

    nonebot.get_driver().register_adapter(Adapter)
    nonebot.load_plugin("nonebot_plugin_auto_assign")  # by its installed package name
    nonebot.load_plugin("package_record")
    yield
