"""Group message counts: each message a group receives reaches the service's weight for the
group exactly once (``ln 2`` a message with the default ``weights.halfLife``), however many bots
of this process received it and whoever counted it: this plugin (``messages`` events), the
service's ``POST /v1/ingress`` for the messages it decided, or another process. The groups
here (40 and up) are used by no other test, so their weights start at nothing."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import pytest
from nonebug import App

from .helpers import BOTS, ROSTER, connect, deliver, group_message, settle, wait_until
from .service import TOKEN, Service

PER_MESSAGE = math.log(2)
"""What one message adds to a weight (messages a day) with the default ``halfLife: 86400``."""
FLOOR = 1.0
"""The default ``weights.floor``: the weight of a group without messages."""


async def expect_weights(
    service: Service, expected: dict[str, float], timeout: float = 10.0
) -> None:
    """Waits until the service's weights are ``expected`` (±1 %), then until the plugin has
    nothing left to report, and checks them again: a message counted twice would show."""
    from nonebot_plugin_auto_assign import config, runtime

    deadline = time.monotonic() + timeout
    while True:
        weights = await service.weights()
        if all(weights.get(g) == pytest.approx(w, rel=0.01) for g, w in expected.items()):
            break
        if time.monotonic() > deadline:
            raise AssertionError(f"weights {_of(weights, expected)} != expected {expected}")
        await anyio.sleep(0.05)
    await wait_until(lambda: not runtime.messages.pending, what="every count reported")
    await anyio.sleep(3 * config.auto_assign_message_report_interval)
    weights = await service.weights()
    assert _of(weights, expected) == pytest.approx(expected, rel=0.01)


def _of(weights: dict[str, float], expected: dict[str, float]) -> dict[str, float | None]:
    return {g: weights.get(g) for g in expected}


@contextmanager
def spy_on_reports(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[float, str, Any]]]:
    """Records the reporter's requests: (when, ``put`` or ``events``, the outcome: the
    message counts sent, or the exception)."""
    from nonebot_plugin_auto_assign import runtime

    client = runtime.client
    assert client is not None
    calls: list[tuple[float, str, Any]] = []
    events, put = client.reporter_events, client.put_reporter

    async def recorded_events(name: str, body: list[dict[str, Any]]) -> None:
        when = time.monotonic()
        counts = [e["counts"] for e in body if e["type"] == "messages"]
        try:
            await events(name, body)
        except Exception as e:
            calls.append((when, "events", (counts, e)))
            raise
        calls.append((when, "events", (counts, None)))

    async def recorded_put(name: str, bots: list[dict[str, Any]]) -> None:
        when = time.monotonic()
        try:
            await put(name, bots)
        except Exception as e:
            calls.append((when, "put", e))
            raise
        calls.append((when, "put", None))

    monkeypatch.setattr(client, "reporter_events", recorded_events)
    monkeypatch.setattr(client, "put_reporter", recorded_put)
    yield calls


async def test_each_message_counts_once_however_many_bots_receive_it(
    app: App, service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Group 40 (bots 1001 and 1002): 10 messages, every one delivered through both bots, 2 of
    them @-mentioning the bot that is not the assignee, and a message of a bot of the fleet.
    Group 41 (1003 only): 3 messages. Group 42 (1001) stays silent."""
    from nonebot_plugin_auto_assign import config, runtime

    ROSTER["1001"] |= {"40", "42"}
    ROSTER["1002"].add("40")
    ROSTER["1003"].add("41")
    async with app.test_api() as ctx:
        bots = connect(ctx)
        assignment = await settle(service, BOTS)
        with spy_on_reports(monkeypatch) as calls:
            requests, counted = runtime.stats.requests, runtime.messages.counted
            for n in range(8):
                assert await deliver(bots, "40", f"hello {n}") == [assignment["40"]]
                await anyio.sleep(0.1)  # over several reports
            other = "1002" if assignment["40"] == "1001" else "1001"
            for n in range(2):
                assert await deliver(bots, "40", f"hey you {n}", at=[other]) == [other]
            assert await deliver(bots, "40", "pong from 1003", user=1003) == []
            for n in range(3):
                assert await deliver(bots, "41", f"alone {n}") == ["1003"]
            assert runtime.stats.requests == requests  # all decided here: counted here
            assert runtime.messages.counted == counted + 13
            await expect_weights(
                service, {"40": 10 * PER_MESSAGE, "41": 3 * PER_MESSAGE, "42": FLOOR}
            )
        # At most one report of the counts every AUTO_ASSIGN_MESSAGE_REPORT_INTERVAL.
        sent = [when for when, kind, out in calls if kind == "events" and out[0]]
        assert len(sent) >= 2, calls
        interval = config.auto_assign_message_report_interval
        assert all(b - a >= interval - 0.01 for a, b in zip(sent, sent[1:])), sent


async def test_messages_the_service_decides_are_counted_once(app: App, service: Service) -> None:
    """``AUTO_ASSIGN_DECIDE_LOCALLY=false``: the service counts the messages it decides for
    their assignee, the plugin those it decided for another bot of this process (which uses
    that answer and asks nothing). 6 messages to group 43 (1001 and 1002): the assignee asks
    first for 3 of them, the other bot for the other 3."""
    from nonebot_plugin_auto_assign import config, runtime

    ROSTER["1001"].add("43")
    ROSTER["1002"].add("43")
    async with app.test_api() as ctx:
        bots = connect(ctx)
        owner = (await settle(service, BOTS))["43"]
        other = "1002" if owner == "1001" else "1001"
        left, counted = runtime.messages.left, runtime.messages.counted
        config.auto_assign_decide_locally = False
        try:
            for n in range(6):
                first, second = (owner, other) if n < 3 else (other, owner)
                requests = runtime.stats.requests
                for b in (first, second):
                    event = group_message(b, "43", f"asked {n}", seq=600_000 + n)
                    await bots[b].handle_event(event)
                assert runtime.stats.requests == requests + 1
        finally:
            config.auto_assign_decide_locally = True
        assert runtime.messages.left == left + 3
        assert runtime.messages.counted == counted + 3
        await expect_weights(service, {"43": 6 * PER_MESSAGE})


async def test_a_group_of_another_process_is_counted_there(app: App, service: Service) -> None:
    """Group 44 is assigned to bot 2001 of another process, which received its messages too:
    this process does not count them, the other one does (here: a ``messages`` event of its
    reporter). Counted once, not once per process."""
    from nonebot_plugin_auto_assign import runtime
    from nonebot_plugin_auto_assign.client import ServiceClient

    elsewhere = runtime.messages.elsewhere
    other = ServiceClient(service.url, TOKEN, 2.0)
    try:
        async with app.test_api() as ctx:
            bots = connect(ctx)
            await settle(service, BOTS)
            await other.put_reporter(
                "other", [{"platform": "onebot", "id": "2001", "online": True, "channels": ["44"]}]
            )
            await wait_until(lambda: runtime.state.table.get("44") == "2001", what="44 → 2001")
            # 1001 and 1002 are in group 44 too, but the service has not heard of it yet.
            ROSTER["1001"].add("44")
            ROSTER["1002"].add("44")
            for n in range(4):
                assert await deliver(bots, "44", f"theirs {n}") == []
            assert runtime.messages.elsewhere == elsewhere + 4
            await other.reporter_events(
                "other", [{"type": "messages", "platform": "onebot", "counts": {"44": 4}}]
            )
            await expect_weights(service, {"44": 4 * PER_MESSAGE})
    finally:
        await other.delete_reporter("other")
        await other.aclose()


async def test_counts_wait_through_an_outage_and_a_409(
    app: App, service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service is down: the counts wait, and reach the restarted service after the full
    state (its 409). Then the service forgets the reporter while counts are waiting: the request
    that carries them gets a 409, the full state goes first, the counts follow."""
    from nonebot_plugin_auto_assign import config, runtime
    from nonebot_plugin_auto_assign.client import UnknownReporter

    ROSTER["1001"].add("45")
    ROSTER["1002"].add("45")
    interval = config.auto_assign_message_report_interval
    async with app.test_api() as ctx:
        bots = connect(ctx)
        await settle(service, BOTS)
        full_states = runtime.reporter.full_states

        service.stop()
        await wait_until(lambda: not runtime.state.connected, what="stream down")
        for n in range(5):
            assert len(await deliver(bots, "45", f"while down {n}")) == 1
        assert runtime.messages.pending.get("45") == 5
        await wait_until(lambda: runtime.reporter._failing, what="a report failed")
        await anyio.sleep(2 * interval)
        assert runtime.messages.pending.get("45") == 5  # kept for the next attempt
        service.start()
        await wait_until(
            lambda: runtime.reporter.full_states > full_states, what="full state resent"
        )
        await settle(service, BOTS)
        await expect_weights(service, {"45": 5 * PER_MESSAGE})

        # Counts waiting (a long interval) when the service forgets the reporter; no
        # heartbeat meanwhile, so that the request with the counts is the one that gets the 409.
        heartbeat = config.auto_assign_heartbeat_interval
        config.auto_assign_message_report_interval = 3600
        config.auto_assign_heartbeat_interval = 3600
        try:
            reports = runtime.reporter.reports
            runtime.reporter.poke()
            await wait_until(lambda: runtime.reporter.reports > reports, what="a heartbeat")
            for n in range(3):
                assert len(await deliver(bots, "45", f"forgotten {n}")) == 1
            assert runtime.messages.pending == {"45": 3}
            full_states = runtime.reporter.full_states
            await service.delete(f"/v1/fleet/reporters/{runtime.reporter.name}")
            with spy_on_reports(monkeypatch) as calls:
                config.auto_assign_message_report_interval = interval
                runtime.reporter.poke()
                await wait_until(lambda: not runtime.messages.pending, what="the counts reported")
        finally:
            config.auto_assign_message_report_interval = interval
            config.auto_assign_heartbeat_interval = heartbeat
        assert runtime.reporter.full_states == full_states + 1
        assert [kind for _, kind, _ in calls] == ["events", "put", "events"], calls
        counts, error = calls[0][2]
        assert counts == [{"45": 3}] and isinstance(error, UnknownReporter), calls
        assert calls[1][2] is None
        assert calls[2][2] == ([{"45": 3}], None)
        await settle(service, BOTS)
        await expect_weights(service, {"45": 8 * PER_MESSAGE})


async def test_a_service_that_refuses_the_counts(
    app: App, service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A service that refuses ``messages`` events (one older than the plugin, say; here: a
    count over its limit of 1,000,000): the plugin stops counting, and reports its fleet as
    before."""
    from nonebot_plugin_auto_assign import messages, runtime

    async with app.test_api() as ctx:
        connect(ctx)
        await settle(service, BOTS)
        monkeypatch.setattr(messages, "MAX_PER_REPORT", 2_000_000)
        before = (await service.weights())["6"]
        full_states = runtime.reporter.full_states
        try:
            runtime.messages.add("6", 1_500_000)
            await wait_until(lambda: runtime.messages.refused, what="counting off")
            assert not runtime.messages.pending and not runtime.messages.enabled
            # The refused request's events are sent again with the full state.
            await wait_until(lambda: runtime.reporter.full_states > full_states, what="full state")
            reports = runtime.reporter.reports
            await wait_until(lambda: runtime.reporter.reports > reports + 1, what="heartbeats")
            assert not runtime.reporter._failing
            await settle(service, BOTS)
            assert (await service.weights())["6"] < before + 1
        finally:
            runtime.messages.refused = False


# ------------------------------------------------------------------------------ the counter alone
def test_the_counter_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from nonebot_plugin_auto_assign import messages
    from nonebot_plugin_auto_assign.messages import MessageCounter

    monkeypatch.setattr(messages, "MAX_GROUPS", 3)
    monkeypatch.setattr(messages, "MAX_SEEN", 4)
    monkeypatch.setattr(messages, "MAX_PER_REPORT", 10)
    wakes: list[int] = []
    c = MessageCounter(lambda: 5.0, wake=lambda: wakes.append(1))

    # Deduplication: the same message once; the oldest forgotten past MAX_SEEN (two
    # generations of MAX_SEEN / 2).
    assert c.first_sight(("1", 42, "hi", 100))
    assert not c.first_sight(("1", 42, "hi", 100))
    for n in range(4):
        assert c.first_sight(("1", 42, "hi", 101 + n))
    assert len(c._seen) + len(c._seen_before) <= 4
    assert not c.first_sight(("1", 42, "hi", 103))
    assert c.first_sight(("1", 42, "hi", 100))  # forgotten: the window is full

    # Distinct groups: at most MAX_GROUPS wait; others are dropped until reported.
    for g in ("1", "2", "3", "4", "1"):
        c.add(g)
    assert c.pending == {"1": 2, "2": 1, "3": 1} and c.dropped == 1 and c.counted == 4
    assert wakes == [1]  # the first count wakes the reporter

    # At most MAX_PER_REPORT a group per report; the rest waits, as do counts made meanwhile.
    c.add("2", 24)
    now = time.monotonic()
    sent = c.take(now)
    assert sent == {"1": 2, "2": 10, "3": 1}
    c.add("3", 2)
    c.sent(sent, now)
    assert c.pending == {"2": 15, "3": 2}
    assert c.take(now + 1) == {}  # the interval has not passed
    assert c.take(now + 1, force=True) == {"2": 10, "3": 2}
    assert c.due_at() == pytest.approx(now + 5)


def test_the_window_forgets_old_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    from nonebot_plugin_auto_assign import messages
    from nonebot_plugin_auto_assign.messages import MessageCounter

    clock = [1000.0]
    monkeypatch.setattr(messages.time, "monotonic", lambda: clock[0])
    c = MessageCounter(lambda: 5.0, wake=lambda: None)
    assert c.first_sight("a")
    clock[0] += messages.SEEN_WINDOW / 2
    assert c.first_sight("b") and not c.first_sight("a")
    clock[0] += messages.SEEN_WINDOW / 2 + 1
    assert c.first_sight("c") and not c.first_sight("a")  # remembered for one window at least
    clock[0] += messages.SEEN_WINDOW + 1
    assert c.first_sight("d")
    assert not c.first_sight("c")  # the generation before
    assert c.first_sight("a") and c.first_sight("b")  # forgotten after two windows at most


def test_interval_zero_counts_nothing() -> None:
    from nonebot_plugin_auto_assign.messages import MessageCounter

    c = MessageCounter(lambda: 0.0, wake=lambda: None)
    assert not c.enabled and c.due_at() is None


async def test_a_stopping_reporter_sends_its_last_counts(service: Service) -> None:
    """On shutdown the counts not reported yet go out before the reporter is removed (a
    reporter of its own here, bot 2005 in group 46)."""
    from nonebot_plugin_auto_assign.client import ServiceClient
    from nonebot_plugin_auto_assign.fleet import Reporter

    client = ServiceClient(service.url, TOKEN, 2.0)
    try:
        reporter = Reporter(
            "stopping",
            "onebot",
            heartbeat=lambda: 3600,
            client=lambda: client,
            message_interval=lambda: 3600,
        )
        reporter.online("2005", {"46"})
        await reporter._send_once(client)  # the full state
        await wait_until(lambda: _known(service, "46"), what="group 46 known to the service")
        reporter.messages.add("46", 7)
        reporter.messages.sent({}, time.monotonic())  # just reported: the next is an hour away
        assert reporter.messages.take(time.monotonic()) == {}
        await reporter.stop(client)
        assert not reporter.messages.pending
        assert (await service.weights())["46"] == pytest.approx(7 * PER_MESSAGE, rel=0.01)
        assert "2005" not in await service.online_bots()
    finally:
        await client.aclose()


async def _known(service: Service, group: str) -> bool:
    return group in await service.weights()
