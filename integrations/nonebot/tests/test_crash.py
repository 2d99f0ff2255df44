"""A NoneBot process killed (SIGKILL): its groups are answered again within about
``sources.http.streamGrace`` (0.5 s), not after ``offlineGrace`` (30 s) of silence.

Two real NoneBot processes (``tests/processes.py``: the FastAPI driver, the OneBot v11
adapter's reverse WebSocket, this plugin with a ``report`` token, and an echo plugin), one bot
each, both in the same groups, against one real service. Each bot is a simulated OneBot
account that delivers the same group messages to its process every 50 ms and records what its
bot sends. One process is killed mid-stream: the kernel closes its assignment stream, which
names its reporter (``?reporter=``); the service takes its bot offline once the stream has not
come back within the grace, and the other process's gate claims its groups from the
``presence`` event on.
"""

from __future__ import annotations

import asyncio
import math
import re
import shutil
import time
from collections import defaultdict

import pytest

from .helpers import wait_until
from .processes import NoneBotProcess, OneBot
from .service import PLATFORM, REPORT_TOKEN, Service

GROUPS = ["501", "502", "503", "504"]
TICK = 0.05
"""Seconds between two rounds of messages (one message per group, to both bots)."""
STREAM_GRACE = 0.5
REPORT_INTERVAL = 0.2
"""Seconds between two reports of a process's message counts."""
PER_MESSAGE = math.log(2)
"""What one counted message adds to a group's weight (the default ``weights.halfLife``)."""


def _report(capsys: pytest.CaptureFixture[str], text: str) -> None:
    with capsys.disabled():
        print(f"\n{text}")


async def test_a_killed_process_costs_its_groups_under_a_second(
    capsys: pytest.CaptureFixture[str],
) -> None:
    service = Service(exclude=[])
    # The brief's sources (streamGrace 0.5 s, offlineGrace 30 s) and the default trigger delays:
    # the groups of the killed bot are answered again through claims, before any rebalance.
    service.configure("")
    service.start()
    bots = {"2001": "crash-a", "2002": "crash-b"}
    processes = {
        bot: NoneBotProcess(
            name,
            {
                "AUTO_ASSIGN_URL": service.url,
                "AUTO_ASSIGN_TOKEN": REPORT_TOKEN,  # the report role is all the plugin needs
                "AUTO_ASSIGN_HEARTBEAT_INTERVAL": "5",
                # Counts for balanceBy: messages, reported often (the victim's last ones die
                # with it).
                "AUTO_ASSIGN_MESSAGE_REPORT_INTERVAL": str(REPORT_INTERVAL),
            },
            log_level="WARNING",
        )
        for bot, name in bots.items()
    }
    onebots = {bot: OneBot(bot, GROUPS) for bot in bots}
    try:
        for p in processes.values():
            p.start()
        for bot, p in processes.items():
            await onebots[bot].connect(p)

        async def settled() -> bool:
            assignment = await service.assignment()
            return (
                await service.online_bots() == set(bots)
                and set(assignment) == set(GROUPS)
                and set(assignment.values()) == set(bots)
            )

        await wait_until(settled, timeout=30.0, what="both bots reported and assigned")
        assignment = await service.assignment()

        seq = 0
        sent_at: dict[tuple[str, int], float] = {}

        async def round_() -> None:
            nonlocal seq
            seq += 1
            now = time.monotonic()
            for group in GROUPS:
                sent_at[(group, seq)] = now
                for ob in onebots.values():
                    await ob.group_message(
                        group, f"tick {seq}", when=1_790_000_000 + seq, message_id=seq
                    )

        def answers() -> dict[tuple[str, int], list[str]]:
            """(group, tick) → the bots that answered it (a bot twice: twice)."""
            out: dict[tuple[str, int], list[str]] = defaultdict(list)
            for bot, ob in onebots.items():
                for s in ob.sent:
                    m = re.fullmatch(r"echo tick (\d+) from (\d+)", s.text)
                    assert m and m.group(2) == bot, s
                    out[(str(s.group), int(m.group(1)))].append(bot)
            return out

        # Warm-up: each process answers its own groups (their assignments streamed to both).
        await round_()
        await wait_until(
            lambda: all((g, seq) in answers() for g in GROUPS), what="the first round answered"
        )
        first = answers()
        assert {g: first[(g, seq)] for g in GROUPS} == {g: [assignment[g]] for g in GROUPS}

        # Steady traffic, then SIGKILL one process in the middle of it.
        victim, survivor = "2001", "2002"
        its_groups = sorted(g for g, b in assignment.items() if b == victim)
        assert its_groups
        stop = asyncio.Event()
        killed_at = 0.0

        async def traffic() -> None:
            next_at = time.monotonic()
            while not stop.is_set():
                await round_()
                next_at += TICK
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))

        started = seq
        sender = asyncio.create_task(traffic())
        try:
            # 20 rounds answered in every group before the kill
            await wait_until(
                lambda: all((g, started + 20) in answers() for g in GROUPS),
                timeout=10.0,
                what="20 rounds answered before the kill",
            )
            killed_at = time.monotonic()
            processes[victim].kill()
            first_after_kill = seq + 1

            async def offline() -> bool:
                return victim not in await service.online_bots()

            await wait_until(offline, timeout=10.0, what=f"{victim} offline")
            offline_after = time.monotonic() - killed_at
            await asyncio.sleep(3.0)  # traffic goes on after the kill
        finally:
            stop.set()
            await sender
        last = seq

        # Every message of the last round is answered, by the survivor; then a moment for a
        # late second answer (which must not come).
        await wait_until(
            lambda: all((g, last) in answers() for g in GROUPS),
            timeout=10.0,
            what="the last round answered",
        )
        await asyncio.sleep(0.5)
        got = answers()

        doubles = sum(1 for bots_ in got.values() if len(bots_) > 1)
        unanswered = [
            (g, n) for g in GROUPS for n in range(first_after_kill, last + 1) if (g, n) not in got
        ]
        # The longest time a group went without an answer after the kill: between the sending
        # of two answered messages in a row (the last answered before the kill counts).
        longest, longest_group = 0.0, ""
        for g in GROUPS:
            times = sorted(
                sent_at[(g, n)] for n in range(1, last + 1) if (g, n) in got
            )
            for a, b in zip(times, times[1:]):
                if b >= killed_at and b - a > longest:
                    longest, longest_group = b - a, g
        after = [got[(g, n)] for g in GROUPS for n in range(first_after_kill, last + 1) if (g, n) in got]
        assert all(a == [survivor] for a in after[-len(GROUPS):])

        log = service.log()
        _report(
            capsys,
            f"crash-fast: SIGKILL of NoneBot process {bots[victim]} (bot {victim}, groups "
            f"{', '.join(its_groups)}), messages every {TICK * 1000:.0f} ms in {len(GROUPS)} groups "
            f"to both bots: {victim} offline at the service after {offline_after * 1000:.0f} ms; "
            f"longest unanswered interval {longest * 1000:.0f} ms (group {longest_group}); "
            f"{len(unanswered)} of {len(GROUPS) * (last - first_after_kill + 1)} messages after "
            f"the kill unanswered; {doubles} answered twice in {len(got)}",
        )
        assert "its assignment stream closed and did not come back" in log, log
        assert doubles == 0
        assert longest < 2.0, f"a group went {longest:.2f} s without an answer"
        assert offline_after < 2.0
        bots_now = {b["bot"]: b for b in await service.get("/v1/bots") if b["platform"] == PLATFORM}
        assert bots_now[victim]["online"] is False and bots_now[survivor]["online"] is True
        # Each answered message is counted by the process that answered it, once: the
        # survivor's groups exactly; the victim's groups every message the survivor answered,
        # and at most every answered message (the victim's counts not reported yet when it died,
        # one report interval at most, die with it). The survivor stops cleanly, sending its
        # last counts first: nothing can be reported after this reading.
        processes[survivor].stop()
        assert processes[survivor].proc is not None
        assert processes[survivor].proc.returncode == 0, processes[survivor].log()

        def answered(g: str, by: str | None = None) -> int:
            return sum(1 for (gg, _), b in got.items() if gg == g and (by is None or by in b))

        bounds = {
            g: (answered(g, survivor), answered(g))
            if g in its_groups
            else (answered(g), answered(g))
            for g in GROUPS
        }
        weights = await service.weights()
        counted = {g: weights.get(g, 0.0) / PER_MESSAGE for g in GROUPS}
        _report(
            capsys,
            "crash-fast, counted (messages, of the answered ones): "
            + ", ".join(f"{g} {counted[g]:.1f} of {bounds[g][1]}" for g in GROUPS),
        )
        for g, (low, high) in bounds.items():
            assert low - 0.5 <= counted[g] <= high + 0.5, (g, counted[g], (low, high))
    finally:
        for ob in onebots.values():
            await ob.close()
        for p in processes.values():
            p.cleanup()
        service.stop()
        shutil.rmtree(service.dir, ignore_errors=True)
