"""The assignment stream names the plugin's reporter (``?reporter=``: the service watches the
process through it, ``sources.http.streamGrace``) and is reopened at once when it drops, so a
transient drop costs nothing: the service keeps the bots online. A stream cut again and again
is retried with the backoff, not in a loop."""

from __future__ import annotations

import time

import anyio
import pytest
from nonebug import App

from .helpers import BOTS, connect, deliver, requests_seen, settle, wait_until
from .service import PLATFORM, Service


async def test_a_dropped_stream_is_reopened_at_once(
    app: App, service: Service, capsys: pytest.CaptureFixture[str]
) -> None:
    from nonebot_plugin_auto_assign import runtime

    async with app.test_api() as ctx:
        bots = connect(ctx)
        await settle(service, BOTS)
        assert runtime.stream_reporter == "nonebug"
        assert runtime.reconnects is not None
        opens = runtime.stream_opens
        # A version gap makes the plugin drop its stream and resync at the next change.
        assert runtime.state.version is not None
        runtime.state.version -= 5
        with requests_seen() as seen:
            await service.put(f"/v1/pins/{PLATFORM}/6", {"bot": "1001"})
            await wait_until(
                lambda: runtime.stream_opens > opens and runtime.state.connected,
                what="the stream reopened",
            )
        assert ("GET", "/v1/assignments/stream?reporter=nonebug") in seen, seen
        delay = runtime.reconnects.last_delay
        assert delay is not None and delay < 0.25, delay  # the backoff starts at 0.5 s
        await wait_until(lambda: runtime.state.table.get("6") == "1001", what="the pin streamed")

        # The service did not miss the process: its bots stayed online all along.
        until = time.monotonic() + 1.0  # twice the stream's grace
        while time.monotonic() < until:
            assert await service.online_bots() == set(BOTS)
            await anyio.sleep(0.05)
        assert "fleet reporter nonebug: its assignment stream closed" not in service.log()
        assert await deliver(bots, "6", "still here") == ["1001"]
        with capsys.disabled():
            print(f"\nstream dropped (version gap): reopened after {delay * 1000:.1f} ms")


def test_reconnect_timing() -> None:
    """At once after a drop; the backoff when the immediate attempt failed too, or when the
    stream was cut three times within five seconds."""
    from nonebot_plugin_auto_assign import Reconnects, config

    r = Reconnects(burst=3, window=5.0)
    assert r.dropped(100.0) == 0.0  # the first retry: at once
    assert r.dropped(100.0) == 0.5  # it failed: the backoff
    assert r.dropped(100.5) == min(1.0, config.auto_assign_reconnect_max)
    r.reopening(101.0)
    assert r.last_delay == 1.0
    r.opened()
    assert r.dropped(102.0) == 0.0  # a new drop: at once again
    r.opened()
    assert r.dropped(103.0) == 0.0  # the third within 5 s
    r.opened()
    assert r.dropped(103.5) == 0.5  # the fourth: cut right away again and again
    r.opened()
    assert r.dropped(105.5) == 0.0  # the first of the three is 5.5 s old
