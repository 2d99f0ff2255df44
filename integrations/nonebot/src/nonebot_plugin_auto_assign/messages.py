"""Group message counts for the service's channel weights (``balanceBy: messages``).

The reporter sends them as a ``messages`` event (``{"type": "messages", "platform": …,
"counts": {group: n}}``): how many messages each group received since the last one. Each
message is counted once however many bots of this process received it: OneBot message ids
differ per account, so a message is recognised by (group, sender, raw message, time), for
``SEEN_WINDOW`` seconds at least. Which messages this process counts at all, and which it
leaves to the service (its ``POST /v1/ingress`` counts the decisions it makes) or to another
process, is decided by the caller (``_count`` in ``__init__``).

Memory is bounded: at most ``MAX_GROUPS`` groups wait to be reported (messages of further
groups are dropped, and counted in ``dropped``), and at most ``MAX_SEEN`` recent messages are
remembered for the deduplication.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable

from nonebot import logger

MAX_GROUPS = 20_000
"""Distinct groups waiting to be reported, at most."""
MAX_SEEN = 16_384
"""Recent messages remembered for the deduplication, at most (in two generations of half)."""
SEEN_WINDOW = 30.0
"""Seconds a message is remembered at least (at most twice that): another bot's copy arriving
later is counted again. Past ``MAX_SEEN / 2`` messages in half a window, less."""
MAX_PER_REPORT = 1_000_000
"""The service refuses more messages than this for one group in one report; the rest wait
for the next report."""


class MessageCounter:
    def __init__(self, interval: Callable[[], float], wake: Callable[[], None]) -> None:
        self._interval = interval
        self._wake = wake
        """Called when the first count waits (the reporter computes when to flush)."""
        self.pending: dict[str, int] = {}
        """Group → messages not reported yet."""
        self._seen: set[int] = set()
        """Hashes of the messages seen in the current generation …"""
        self._seen_before: set[int] = set()
        """… and in the one before."""
        self._generation_ends = float("-inf")
        self._flushed_at = float("-inf")
        self.refused = False
        """The service refused a ``messages`` event (an older service): counting is off."""
        self.counted = 0
        """Messages this process counted (for tests and logs)."""
        self.left = 0
        """Messages left to the service, which counted them when it decided them."""
        self.elsewhere = 0
        """Messages left to another process, whose bot the group is assigned to."""
        self.dropped = 0
        """Messages not counted for want of room (``MAX_GROUPS``)."""
        self.reported = 0
        """Messages the service has acknowledged."""

    @property
    def enabled(self) -> bool:
        return not self.refused and self._interval() > 0

    def first_sight(self, key: Hashable) -> bool:
        """Whether the message ``key`` is new (and remembers it)."""
        h = hash(key)
        seen = self._seen
        if h in seen or h in self._seen_before:
            return False
        now = time.monotonic()
        if now >= self._generation_ends or len(seen) >= MAX_SEEN // 2:
            self._seen_before, seen = seen, set()
            self._seen = seen
            self._generation_ends = now + SEEN_WINDOW
        seen.add(h)
        return True

    def add(self, group: str, n: int = 1) -> None:
        pending = self.pending
        count = pending.get(group)
        if count is not None:
            pending[group] = count + n
        elif len(pending) < MAX_GROUPS:
            pending[group] = n
            if len(pending) == 1:
                self._wake()
        else:
            if not self.dropped:
                logger.warning(
                    f"auto-assign: message counts of more than {MAX_GROUPS} groups wait to be "
                    "reported; messages of further groups are not counted until they are"
                )
            self.dropped += n
            return
        self.counted += n

    # ---------------------------------------------------------------- for the reporter
    def due_at(self) -> float | None:
        """When the counts waiting should be reported (monotonic); ``None``: nothing waits."""
        if not self.pending or not self.enabled:
            return None
        return self._flushed_at + self._interval()

    def take(self, now: float, force: bool = False) -> dict[str, int]:
        """The counts to report now (``MAX_PER_REPORT`` at most per group), if due (or
        ``force``); they stay pending until ``sent``."""
        due = self.due_at()
        if due is None or (now < due and not force):
            return {}
        return {g: min(n, MAX_PER_REPORT) for g, n in self.pending.items()}

    def sent(self, counts: dict[str, int], now: float) -> None:
        """The service acknowledged ``counts``: they leave the pending ones."""
        pending = self.pending
        for group, n in counts.items():
            left = pending.get(group, 0) - n
            if left > 0:
                pending[group] = left
            else:
                pending.pop(group, None)
            self.reported += n
        self._flushed_at = now

    def refuse(self, why: object) -> None:
        """The service refused the counts (a service without ``messages`` events): counting
        stops for this process's lifetime, and the reporter goes on without them."""
        logger.warning(
            f"auto-assign: the service refused the message counts ({why}); is it older than "
            "the plugin? Group messages are no longer counted (AUTO_ASSIGN_MESSAGE_REPORT_"
            "INTERVAL=0 silences this)"
        )
        self.refused = True
        self.pending.clear()
        self._seen.clear()
        self._seen_before.clear()
