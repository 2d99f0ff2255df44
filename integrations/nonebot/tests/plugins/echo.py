"""Test-only plugin of the real NoneBot processes (``tests/processes.py``): answers every group
message ``tick <n>`` with ``echo tick <n> from <bot>``, through the OneBot ``send_group_msg``
action, which the simulated OneBot implementation records."""

from nonebot import on_message
from nonebot.adapters.onebot.v11 import Bot, GroupMessageEvent
from nonebot.rule import startswith

echo = on_message(rule=startswith("tick "), priority=10, block=True)


@echo.handle()
async def _echo(bot: Bot, event: GroupMessageEvent) -> None:
    text = event.get_plaintext().strip()
    await bot.send_group_msg(group_id=event.group_id, message=f"echo {text} from {bot.self_id}")
