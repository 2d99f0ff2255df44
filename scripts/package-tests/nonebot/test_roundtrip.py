"""Two OneBot v11 bots of one NoneBot in the same two groups: the plugin (from its wheel)
reports them, the packaged service assigns both groups, and a message in each group is handled
by its assignee only."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

import httpx
import nonebot
from nonebot.adapters.onebot.v11 import Adapter, GroupMessageEvent
from nonebot.adapters.onebot.v11 import Bot as V11Bot
from nonebug import App

BOTS = ("4001", "4002")
GROUPS = ("400001", "400002")


class GroupsBot(V11Bot):
    """A OneBot v11 bot that is in GROUPS (its get_group_list, which the plugin reports)."""

    async def get_group_list(self, **kwargs: Any) -> list[dict[str, Any]]:  # type: ignore[override]
        return [{"group_id": int(g), "group_name": g, "member_count": 3, "max_member_count": 200} for g in GROUPS]


def group_message(self_id: str, group: str, n: int) -> GroupMessageEvent:
    event = Adapter.json_to_event(
        {
            "time": 1_790_000_000 + n,
            "self_id": int(self_id),
            "post_type": "message",
            "message_type": "group",
            "sub_type": "normal",
            "message_id": n,
            "group_id": int(group),
            "user_id": 42,
            "anonymous": None,
            "message": [{"type": "text", "data": {"text": "hello"}}],
            "raw_message": "hello",
            "font": 0,
            "sender": {"user_id": 42, "nickname": "alice", "card": "", "role": "member"},
        }
    )
    assert isinstance(event, GroupMessageEvent)
    return event


async def service_assignment() -> dict[str, str]:
    async with httpx.AsyncClient(
        base_url=os.environ["AUTO_ASSIGN_URL"],
        headers={"Authorization": f"Bearer {os.environ['AUTO_ASSIGN_TOKEN']}"},
        trust_env=False,
    ) as c:
        r = await c.get("/v1/assignments?platform=onebot")
        r.raise_for_status()
        a: dict[str, str] = r.json().get("onebot", {})
        return a


async def test_only_the_assignee_handles_a_group_message(app: App) -> None:
    import nonebot_plugin_auto_assign
    from nonebot_plugin_auto_assign import runtime
    from package_record import HANDLED

    # the installed wheel, not a checkout
    assert "site-packages" in (nonebot_plugin_auto_assign.__file__ or ""), nonebot_plugin_auto_assign.__file__
    print(f"\nnonebot round trip: plugin from {nonebot_plugin_auto_assign.__file__}", file=sys.stderr)
    async with app.test_api() as ctx:
        adapter = nonebot.get_adapter(Adapter)
        bots = {i: ctx.create_bot(base=GroupsBot, adapter=adapter, self_id=i) for i in BOTS}
        # The service assigns both groups, and the plugin's streamed table has it.
        deadline = time.monotonic() + 15
        while True:
            a = await service_assignment()
            if all(a.get(g) in BOTS for g in GROUPS) and runtime.state.connected and runtime.state.table == a:
                break
            assert time.monotonic() < deadline, f"no settled assignment: service {a}, plugin {runtime.state.table}"
            await asyncio.sleep(0.05)
        for n, group in enumerate(GROUPS, start=1):
            before = len(HANDLED)
            # the same message reaches both bots, concurrently, through the adapter
            await asyncio.gather(*(bot.handle_event(group_message(i, group, n)) for i, bot in bots.items()))
            handled = sorted({b for b, g in HANDLED[before:] if g == int(group)})
            assert handled == [a[group]], f"group {group}: handled by {handled}, assigned to {a[group]}"
            print(f"nonebot round trip: group {group} assigned to {a[group]}, handled by {a[group]} only", file=sys.stderr)
