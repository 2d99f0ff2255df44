"""Test-only plugin: records which bot handled which message."""

from nonebot import on_command, on_message
from nonebot.adapters.onebot.v11 import Bot, GroupMessageEvent

HANDLED: list[tuple[str, int, str]] = []
"""(bot, group, plain text) of every group message a matcher ran for."""

record = on_message(priority=1, block=False)


@record.handle()
async def _record(bot: Bot, event: GroupMessageEvent) -> None:
    HANDLED.append((bot.self_id, event.group_id, event.get_plaintext()))


where = on_command("where", priority=5, block=True)


@where.handle()
async def _where(bot: Bot, event: GroupMessageEvent) -> None:
    HANDLED.append((bot.self_id, event.group_id, "command where"))


ping = on_command("ping", priority=5, block=True)


@ping.handle()
async def _ping(bot: Bot) -> None:
    await ping.finish(f"pong from {bot.self_id}")
