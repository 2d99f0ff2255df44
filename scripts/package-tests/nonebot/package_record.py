"""Records which bot's matchers ran for which group message."""

from nonebot import on_message
from nonebot.adapters.onebot.v11 import Bot, GroupMessageEvent

HANDLED: list[tuple[str, int]] = []

record = on_message(priority=1, block=False)


@record.handle()
async def _record(bot: Bot, event: GroupMessageEvent) -> None:
    HANDLED.append((bot.self_id, event.group_id))
