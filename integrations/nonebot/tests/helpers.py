"""Bots, events and waits for the tests."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import nonebot
from nonebot.adapters.onebot.v11 import Adapter, GroupMessageEvent, PrivateMessageEvent
from nonebot.adapters.onebot.v11 import Bot as V11Bot

BOTS = ("1001", "1002", "1003")
GROUPS = tuple(str(g) for g in range(1, 13))
EXCLUDED = "12"  # excludeChannels: ["onebot:12"] in the service's config

ROSTER: dict[str, set[str]] = {}
"""What each bot's ``get_group_list`` answers (tests may change it), and the groups of bots
of another process that a test adds."""


def reset_roster() -> None:
    ROSTER.clear()
    ROSTER["1001"] = {str(g) for g in range(1, 13)}
    ROSTER["1002"] = {str(g) for g in range(1, 9)}
    ROSTER["1003"] = {str(g) for g in range(5, 13)}


reset_roster()


class RosterBot(V11Bot):
    """A OneBot v11 bot whose ``get_group_list`` answers from ``ROSTER`` (so bots can connect
    concurrently; nonebug's API expectations are one FIFO queue for every bot)."""

    async def get_group_list(self, **kwargs: Any) -> list[dict[str, Any]]:  # type: ignore[override]
        return [
            {"group_id": int(g), "group_name": f"group {g}", "member_count": 10, "max_member_count": 200}
            for g in sorted(ROSTER.get(self.self_id, ()), key=int)
        ]


def members(group: str, connected: Iterable[str]) -> list[str]:
    return [b for b in connected if group in ROSTER.get(b, ())]


_seq = itertools.count(1)


def group_message(
    self_id: str,
    group: str | int,
    text: str,
    *,
    user: int = 42,
    at: Iterable[str] = (),
    seq: int | None = None,
    role: str = "member",
) -> GroupMessageEvent:
    """A group message as OneBot sends it (parsed by the adapter's own collator). ``seq``
    makes the message distinct (message id and time): the same message delivered to several
    bots must share it. ``role``: the sender's (``member``, ``admin`` or ``owner``)."""
    n = next(_seq) if seq is None else seq
    segments: list[dict[str, Any]] = [{"type": "at", "data": {"qq": q}} for q in at]
    segments.append({"type": "text", "data": {"text": (" " if at else "") + text}})
    raw = "".join(f"[CQ:at,qq={q}]" for q in at) + (" " if at else "") + text
    event = Adapter.json_to_event(
        {
            "time": 1_790_000_000 + n,
            "self_id": int(self_id),
            "post_type": "message",
            "message_type": "group",
            "sub_type": "normal",
            "message_id": n,
            "group_id": int(group),
            "user_id": user,
            "anonymous": None,
            "message": segments,
            "raw_message": raw,
            "font": 0,
            "sender": {"user_id": user, "nickname": "alice", "card": "", "role": role},
        }
    )
    assert isinstance(event, GroupMessageEvent)
    return event


def private_message(self_id: str, text: str, *, user: int = 42) -> PrivateMessageEvent:
    """A private (friend) message to ``self_id``, as OneBot sends it."""
    n = next(_seq)
    event = Adapter.json_to_event(
        {
            "time": 1_790_000_000 + n,
            "self_id": int(self_id),
            "post_type": "message",
            "message_type": "private",
            "sub_type": "friend",
            "message_id": n,
            "user_id": user,
            "message": [{"type": "text", "data": {"text": text}}],
            "raw_message": text,
            "font": 0,
            "sender": {"user_id": user, "nickname": "alice"},
        }
    )
    assert isinstance(event, PrivateMessageEvent)
    return event


def notice(self_id: str, group: str, kind: str, user: str | None = None) -> Any:
    """A group_increase (``kind="increase"``) or group_decrease notice; ``user`` defaults to
    the bot itself."""
    sub_type = "invite" if kind == "increase" else ("kick_me" if user is None else "leave")
    event = Adapter.json_to_event(
        {
            "time": 1_790_000_000,
            "self_id": int(self_id),
            "post_type": "notice",
            "notice_type": f"group_{kind}",
            "sub_type": sub_type,
            "group_id": int(group),
            "operator_id": 99,
            "user_id": int(user or self_id),
        }
    )
    return event


async def deliver(
    bots: dict[str, V11Bot], group: str, text: str, *, user: int = 42, at: Iterable[str] = ()
) -> list[str]:
    """Delivers one group message to every connected bot that is in the group, concurrently
    and through the adapter (``Bot.handle_event``), as OneBot connections do; returns the bots
    whose matchers ran for it."""
    from .plugins.record import HANDLED

    n = next(_seq)
    at = list(at)
    receivers = [b for b in members(group, bots) if b in nonebot.get_bots()]
    before = len(HANDLED)
    await asyncio.gather(
        *(bots[b].handle_event(group_message(b, group, text, user=user, at=at, seq=n)) for b in receivers)
    )
    return sorted({h[0] for h in HANDLED[before:] if h[1] == int(group)})


async def wait_until(pred: Callable[[], Any], timeout: float = 10.0, what: str = "") -> None:
    """Waits until ``pred()`` (or what it returns, awaited) is true."""
    deadline = time.monotonic() + timeout
    while not (await r if inspect.isawaitable(r := pred()) else r):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or pred}")
        await anyio.sleep(0.01)


def connect(ctx: Any, ids: Iterable[str] = BOTS) -> dict[str, V11Bot]:
    adapter = nonebot.get_adapter(Adapter)
    return {i: ctx.create_bot(base=RosterBot, adapter=adapter, self_id=i) for i in ids}


def disconnect(ctx: Any, bot: V11Bot) -> None:
    bot.adapter.bot_disconnect(bot)
    ctx.connected_bot.discard(bot)  # else nonebug disconnects it again at the context's exit


async def settle(service: Any, online: Iterable[str], timeout: float = 10.0) -> dict[str, str]:
    """Waits until the service sees exactly ``online`` online, assigns every group some
    online bot is in (but the excluded one) to an online member, and the plugin's streamed
    table equals the service's assignment, twice in a row; returns the assignment."""
    from nonebot_plugin_auto_assign import runtime

    online = set(online)
    expected = {g for b in online for g in ROSTER[b]} - {EXCLUDED}
    deadline = time.monotonic() + timeout
    last: dict[str, str] | None = None
    why = ""
    while True:
        a = await service.assignment()
        ok = False
        if await service.online_bots() & set(ROSTER) != online:
            why = f"online {await service.online_bots()} != {online}"
        elif set(a) != expected:
            why = f"assigned {sorted(a, key=int)} != {sorted(expected, key=int)}"
        elif any(b not in online or g not in ROSTER[b] for g, b in a.items()):
            why = f"assignment {a} names a bot offline or not a member"
        elif runtime.state.table != a or not runtime.state.connected:
            why = f"plugin table {runtime.state.table} != {a}"
        else:
            ok = True
        if ok and last == a:
            return a
        last = a if ok else None
        if time.monotonic() > deadline:
            raise AssertionError(f"assignment did not settle: {why}")
        await anyio.sleep(0.05)


class Reply:
    """The reply nonebug's ``should_call_send`` expects, whatever its text; keeps the text. A
    send nonebug does not expect (a second bot replying, say) fails the test."""

    def __init__(self) -> None:
        self.text: str | None = None

    def __eq__(self, other: object) -> bool:
        self.text = str(other)
        return True

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "<any reply>"


async def ask(
    ctx: Any,
    bots: dict[str, V11Bot],
    group: str,
    text: str,
    answerer: str,
    *,
    user: int = 42,
    role: str = "member",
    at: Iterable[str] = (),
) -> str:
    """Sends ``text`` to ``group`` through every connected member bot at once, as ``deliver``;
    ``answerer`` must reply, once, and no other bot may: returns the reply."""
    n = next(_seq)
    at = list(at)
    receivers = [b for b in members(group, bots) if b in nonebot.get_bots()]
    assert answerer in receivers, (answerer, receivers)
    events = {
        b: group_message(b, group, text, user=user, seq=n, role=role, at=at) for b in receivers
    }
    reply = Reply()
    ctx.should_call_send(events[answerer], reply, result={"message_id": n}, bot=bots[answerer])
    await asyncio.gather(*(bots[b].handle_event(events[b]) for b in receivers))
    assert ctx.wait_list.empty(), f"{answerer} did not reply to {text!r}"
    assert reply.text is not None
    return reply.text


class _AnyOf:
    """An expected event for nonebug's ``should_call_send`` that matches any of ``events``
    (nonebug compares ``model_dump()`` of both); remembers which one it matched."""

    def __init__(self, events: dict[str, Any]) -> None:
        self.events = events
        self.matched: str | None = None

    def model_dump(self, **kwargs: Any) -> Any:
        return self

    def __eq__(self, other: object) -> bool:
        for bot, event in self.events.items():
            if event.model_dump() == other:
                self.matched = bot
                return True
        return False

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = None  # type: ignore[assignment]


async def ask_any(
    ctx: Any,
    bots: dict[str, V11Bot],
    group: str,
    text: str,
    *,
    user: int = 42,
    role: str = "member",
) -> tuple[str, str]:
    """As ``ask``, when it is not known in advance which bot answers (a claim decides):
    exactly one bot must reply, once. Returns (that bot, the reply)."""
    n = next(_seq)
    receivers = [b for b in members(group, bots) if b in nonebot.get_bots()]
    events = {b: group_message(b, group, text, user=user, seq=n, role=role) for b in receivers}
    expected = _AnyOf(events)
    reply = Reply()
    ctx.should_call_send(expected, reply, result={"message_id": n})
    await asyncio.gather(*(bots[b].handle_event(events[b]) for b in receivers))
    assert ctx.wait_list.empty(), f"no bot replied to {text!r}"
    assert reply.text is not None and expected.matched is not None
    return expected.matched, reply.text


async def ask_private(ctx: Any, bot: V11Bot, text: str, *, user: int = 42) -> str:
    """A private message to ``bot`` (not gated): its reply."""
    event = private_message(bot.self_id, text, user=user)
    reply = Reply()
    ctx.should_call_send(event, reply, result={"message_id": 1}, bot=bot)
    await bot.handle_event(event)
    assert ctx.wait_list.empty(), f"{bot.self_id} did not reply to {text!r}"
    assert reply.text is not None
    return reply.text


@contextmanager
def requests_seen() -> Iterator[list[tuple[str, str]]]:
    """Every request the plugin's client sends meanwhile: (method, path with its query)."""
    from nonebot_plugin_auto_assign import runtime

    assert runtime.client is not None
    seen: list[tuple[str, str]] = []

    async def hook(request: Any) -> None:
        seen.append((request.method, request.url.raw_path.decode()))

    hooks = runtime.client.http.event_hooks["request"]
    hooks.append(hook)
    try:
        yield seen
    finally:
        hooks.remove(hook)
