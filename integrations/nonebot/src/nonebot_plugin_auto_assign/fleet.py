"""The fleet source: this process's bots and their groups, reported to the service.

One reporter per NoneBot process (``/v1/fleet/reporters/{name}``): the full state first
(``PUT``), then events (``online`` with the group list, ``offline``, ``joined``, ``left``) and a
heartbeat. The service keeps reporters in memory only: a 409 (it restarted, or did not hear from
us for ``offlineGrace``) is answered with the full state, and so is any failed request once the
service is back, since the full state is authoritative (it replaces what was reported before).
One task sends everything, in order.

The group message counts (``messages.py``) ride along as a ``messages`` event, at most every
``message_report_interval`` seconds: with the events when there are any, else instead of a
heartbeat. They stay pending until the service acknowledges them: a failed request, or a 409
and the full state that follows it, sends them again with the next events.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anyio
from nonebot import logger

from .client import Rejected, ServiceClient, UnknownReporter, Unreachable
from .messages import MessageCounter


def refuses_counts(e: Rejected) -> bool:
    """The service refused a request because of its ``messages`` event (a service older than
    ``messages`` events names the unknown type), or the request was too large."""
    text = str(e)
    return e.status == 413 or (
        e.status in (400, 422) and ("messages" in text or "counts" in text)
    )


class Reporter:
    def __init__(
        self,
        name: str,
        platform: str,
        heartbeat: Callable[[], float],
        client: Callable[[], ServiceClient | None],
        message_interval: Callable[[], float] = lambda: 0.0,
    ) -> None:
        self.name = name
        self.platform = platform
        self._heartbeat = heartbeat
        self._client = client
        self.messages = MessageCounter(message_interval, wake=lambda: self._wake.set())
        """Group message counts, reported with the events."""
        self.groups: dict[str, set[str]] = {}
        """Bots reported online → their groups."""
        self._pending: list[dict[str, Any]] = []
        self._fetching: dict[str, list[tuple[bool, str]]] = {}
        """Bots whose group list is being fetched → their joins (True) and leaves seen since."""
        self._need_full = True
        self._poked = False
        self._wake = anyio.Event()
        self._seq = 0
        """Changes queued so far."""
        self._sent = 0
        """Changes the service has acknowledged (``_seq`` at the last successful send)."""
        self._sent_event = anyio.Event()
        self._failing = False
        self.reports = 0
        """Successful requests (for tests and logs)."""
        self.full_states = 0

    # ---------------------------------------------------------------- changes
    def _queue(self, event: dict[str, Any] | None) -> None:
        if event is not None:
            self._pending.append(event)
        self._seq += 1
        self._wake.set()

    def fetching(self, bot: str) -> None:
        """``bot``'s group list is being fetched: its own joins and leaves seen meanwhile are
        kept and applied to the list when it arrives."""
        self._fetching.setdefault(bot, [])

    def fetch_failed(self, bot: str) -> None:
        """The fetch failed: the joins and leaves seen meanwhile apply to the known list."""
        for joined, group in self._fetching.pop(bot, []):
            (self.joined if joined else self.left)(bot, group)

    def refreshed(self, bot: str, groups: set[str]) -> None:
        """A fresh group list of a bot reported online: reported only if it differs."""
        groups = self._with_notices(bot, groups)
        if self.groups.get(bot) != groups:
            self.online(bot, groups)

    def _with_notices(self, bot: str, groups: set[str]) -> set[str]:
        groups = set(groups)
        for joined, group in self._fetching.pop(bot, []):
            if joined:
                groups.add(group)
            else:
                groups.discard(group)
        return groups

    def online(self, bot: str, groups: set[str]) -> None:
        groups = self._with_notices(bot, groups)
        self.groups[bot] = groups
        self._queue(
            {"type": "online", "platform": self.platform, "id": bot, "channels": sorted(groups)}
        )

    def offline(self, bot: str) -> None:
        self._fetching.pop(bot, None)
        if self.groups.pop(bot, None) is None:
            return
        self._queue({"type": "offline", "platform": self.platform, "id": bot})

    def joined(self, bot: str, group: str) -> None:
        if bot in self._fetching:
            self._fetching[bot].append((True, group))
            return
        groups = self.groups.get(bot)
        if groups is None or group in groups:
            return
        groups.add(group)
        self._queue({"type": "joined", "platform": self.platform, "id": bot, "channel": group})

    def left(self, bot: str, group: str) -> None:
        if bot in self._fetching:
            self._fetching[bot].append((False, group))
            return
        groups = self.groups.get(bot)
        if groups is None or group not in groups:
            return
        groups.discard(group)
        self._queue({"type": "left", "platform": self.platform, "id": bot, "channel": group})

    def poke(self) -> None:
        """Check now that the service knows us (a heartbeat; a 409 brings the full state)."""
        self._poked = True
        self._wake.set()

    def all_sent(self) -> bool:
        return self._sent >= self._seq and not self._need_full

    @property
    def queued(self) -> int:
        """How many changes were queued so far: a reading taken before a request and compared
        after it tells whether a change happened meanwhile."""
        return self._seq

    async def wait_sent(self, timeout: float) -> bool:
        """Waits (at most ``timeout`` s) until every change queued so far has been sent; not at
        all while the service cannot be reached."""
        target = self._seq
        if self._failing:
            return self._sent >= target
        with anyio.move_on_after(timeout):
            while self._sent < target:
                await self._sent_event.wait()
        return self._sent >= target

    # ---------------------------------------------------------------- the sender
    def _full_state(self) -> list[dict[str, Any]]:
        return [
            {"platform": self.platform, "id": bot, "online": True, "channels": sorted(groups)}
            for bot, groups in sorted(self.groups.items())
        ]

    async def run(self) -> None:
        failures = 0
        last_contact = time.monotonic()
        retry_at = 0.0
        while True:
            now = time.monotonic()
            if failures:
                delay = retry_at - now
            elif self._need_full or self._pending or self._poked:
                delay = 0.0
            else:
                delay = last_contact + self._heartbeat() - now
                counts_due = self.messages.due_at()
                if counts_due is not None:
                    delay = min(delay, counts_due - now)
            if delay > 0:
                with anyio.move_on_after(delay):
                    await self._wake.wait()
                woken = self._wake.is_set()
                self._wake = anyio.Event()
                if woken and not failures:
                    continue  # see what is due now (a change: at once; counts: maybe later)
            else:
                self._wake = anyio.Event()
            client = self._client()
            if client is None or client.closed:
                return
            try:
                await self._send_once(client)
            except (Unreachable, Rejected) as e:
                failures += 1
                self._need_full = True
                retry_at = time.monotonic() + min(30.0, 0.5 * 2 ** min(failures, 6))
                if not self._failing:
                    self._failing = True
                    if isinstance(e, Rejected) and e.forbidden:
                        logger.error(
                            f"auto-assign: reporter {self.name}: {e}: AUTO_ASSIGN_TOKEN's role "
                            "may not report the fleet; the plugin needs a token of the report "
                            "role (or admin) in the service's api.tokens; retrying"
                        )
                    else:
                        logger.warning(f"auto-assign: reporter {self.name}: {e}; retrying")
                continue
            if self._failing:
                self._failing = False
                logger.info(f"auto-assign: reporter {self.name}: the service is reachable again")
            failures = 0
            last_contact = time.monotonic()

    async def _send_once(self, client: ServiceClient) -> None:
        seq = self._seq
        now = time.monotonic()
        counts = self.messages.take(now)
        if self._need_full:
            bots = self._full_state()
            self._pending.clear()  # the full state covers them
            await client.put_reporter(self.name, bots)
            self._need_full = False
            self.full_states += 1
            logger.info(
                f"auto-assign: reporter {self.name}: full state sent "
                f"({len(bots)} bot(s), {sum(len(b['channels']) for b in bots)} group(s))"
            )
        elif self._pending or counts:
            events, self._pending = self._pending, []
            body = events + self._messages_event(counts)
            try:
                await client.reporter_events(self.name, body)
            except UnknownReporter:
                # Nothing was applied: the full state covers the events, the counts are sent
                # after it.
                self._need_full = True
                return
            except BaseException as e:
                self._pending[:0] = events  # resent (or covered by the full state)
                if counts and isinstance(e, Rejected) and refuses_counts(e):
                    self.messages.refuse(e)
                raise
            if counts:
                self.messages.sent(counts, now)
        else:
            try:
                await client.heartbeat(self.name)
            except UnknownReporter:
                logger.info(f"auto-assign: reporter {self.name}: unknown to the service; resending")
                self._need_full = True
                return
        self.reports += 1
        self._poked = False
        self._sent = seq
        self._sent_event.set()
        self._sent_event = anyio.Event()

    def _messages_event(self, counts: dict[str, int]) -> list[dict[str, Any]]:
        if not counts:
            return []
        return [{"type": "messages", "platform": self.platform, "counts": counts}]

    async def stop(self, client: ServiceClient | None) -> None:
        """The process stops: the counts not reported yet are sent, and its bots go offline at
        once (not after ``offlineGrace``)."""
        if client is None or client.closed:
            return
        now = time.monotonic()
        counts = self.messages.take(now, force=True)
        if counts and not self._need_full:
            try:
                await client.reporter_events(self.name, self._messages_event(counts))
                self.messages.sent(counts, now)
            except (Unreachable, Rejected, UnknownReporter) as e:
                logger.debug(f"auto-assign: reporter {self.name}: last counts not sent: {e}")
        try:
            await client.delete_reporter(self.name)
        except (Unreachable, Rejected, UnknownReporter) as e:
            logger.debug(f"auto-assign: reporter {self.name}: not removed: {e}")
