"""The gate's per-message overhead for an assigned group (prints median and p99).

Measured on the event preprocessor itself, called as NoneBot calls it, for the assignee (the
message passes) and for another bot (``IgnoredException``), each over ``BENCH_CALLS`` calls
(default 20,000; ``BENCH_CALLS``); and NoneBot's whole ``handle_event`` with the gate on and
off (``BENCH_E2E_CALLS``, default 500 each)."""

from __future__ import annotations

import os
import statistics
import time

import pytest
from nonebot.exception import IgnoredException
from nonebug import App

from .helpers import BOTS, connect, group_message, settle
from .service import Service

CALLS = int(os.environ.get("BENCH_CALLS", "20000"))
E2E_CALLS = int(os.environ.get("BENCH_E2E_CALLS", "500"))


def _figures(samples: list[int]) -> str:
    samples.sort()
    median = statistics.median(samples) / 1000
    p99 = samples[int(len(samples) * 0.99) - 1] / 1000
    return f"median {median:6.2f} µs   p99 {p99:6.2f} µs   ({len(samples)} calls)"


@pytest.mark.bench
async def test_gate_overhead_for_an_assigned_group(app: App, service: Service, capsys: pytest.CaptureFixture[str]) -> None:
    from nonebot import logger
    from nonebot.message import handle_event

    from nonebot_plugin_auto_assign import auto_assign_preprocessor, config, runtime

    from .plugins.record import HANDLED

    async with app.test_api() as ctx:
        bots = connect(ctx)
        assignment = await settle(service, BOTS)
        group = "6"
        owner = assignment[group]
        other = next(b for b in BOTS if b != owner)
        requests = runtime.stats.requests
        results = {}
        for label, bot_id in (("assignee (passes)", owner), ("other bot (IgnoredException)", other)):
            bot = bots[bot_id]
            event = group_message(bot_id, group, "hello there", seq=700_000)
            samples = []
            for _ in range(CALLS):
                t0 = time.perf_counter_ns()
                try:
                    await auto_assign_preprocessor(bot, event)
                except IgnoredException:
                    pass
                samples.append(time.perf_counter_ns() - t0)
            results[label] = _figures(samples)
        # The same, each call a new message (the assignee's process counts it for the group's
        # weight; the other calls found the message counted already).
        bot = bots[owner]
        first = group_message(owner, group, "hello there", seq=700_002)
        events = [first.model_copy(update={"time": first.time + n}) for n in range(CALLS)]
        pending = dict(runtime.messages.pending)
        counted = runtime.messages.counted
        samples = []
        for event in events:
            t0 = time.perf_counter_ns()
            await auto_assign_preprocessor(bot, event)
            samples.append(time.perf_counter_ns() - t0)
        assert runtime.messages.counted == counted + CALLS
        runtime.messages.pending = pending  # not for the service's weights (nothing awaited)
        results["assignee, a new message each"] = _figures(samples)
        assert runtime.stats.requests == requests  # no network round trip

        # NoneBot's whole dispatch (the preprocessor with its dependency injection, then the
        # test matchers' rules, some of which NoneBot runs in worker threads), gate on and off
        # alternately, logging at WARNING: for the assignee and for another bot, whose matchers
        # the gate spares.
        e2e = {}
        logger.configure(extra={"nonebot_log_level": "WARNING"})
        try:
            for who, bot_id in (("assignee", owner), ("other bot", other)):
                bot = bots[bot_id]
                event = group_message(bot_id, group, "hello there", seq=700_001)
                on: list[int] = []
                off: list[int] = []
                for _ in range(E2E_CALLS):
                    for enabled, samples in ((True, on), (False, off)):
                        config.auto_assign_enabled = enabled
                        t0 = time.perf_counter_ns()
                        await handle_event(bot, event)
                        samples.append(time.perf_counter_ns() - t0)
                    HANDLED.clear()
                e2e[f"{who}, gate on"] = _figures(on)
                e2e[f"{who}, gate off"] = _figures(off)
        finally:
            config.auto_assign_enabled = True
            logger.configure(extra={"nonebot_log_level": "INFO"})

    with capsys.disabled():
        print("\n\ngate overhead for an assigned group; the event preprocessor alone:")
        for label, line in results.items():
            print(f"  {label:30} {line}")
        print("NoneBot's whole handle_event for the same message (dominated by NoneBot itself):")
        for label, line in e2e.items():
            print(f"  {label:30} {line}")
        print()
