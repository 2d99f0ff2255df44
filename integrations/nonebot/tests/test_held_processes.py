"""A group an operator holds, in two real NoneBot processes with a bot each in it: nobody
answers its messages (the service's ingress says "held", and so does the plugin's own list of
holds), but each of the plugin's commands there gets exactly one reply across both processes
(the command gate, ``POST /v1/gate/owned`` per message)."""

from __future__ import annotations

import asyncio
import shutil
from collections import Counter

from .helpers import wait_until
from .processes import NoneBotProcess, OneBot
from .service import PLATFORM, REPORT_TOKEN, Service

GROUPS = ["701", "702"]
HELD = "701"


async def test_commands_in_a_held_group_get_one_reply_across_processes() -> None:
    service = Service(exclude=[])
    service.start()
    bots = {"4001": "held-a", "4002": "held-b"}
    processes = {
        bot: NoneBotProcess(name, {"AUTO_ASSIGN_URL": service.url, "AUTO_ASSIGN_TOKEN": REPORT_TOKEN})
        for bot, name in bots.items()
    }
    onebots = {bot: OneBot(bot, GROUPS) for bot in bots}
    try:
        for p in processes.values():
            p.start()
        for bot, p in processes.items():
            await onebots[bot].connect(p)

        async def assigned() -> bool:
            return set(await service.assignment()) == set(GROUPS)

        await wait_until(assigned, timeout=30.0, what="both groups assigned")
        await service.put(f"/v1/pins/{PLATFORM}/{HELD}", {"bot": None})

        async def held() -> bool:
            return set(await service.assignment()) == {"702"}

        await wait_until(held, what="the hold in force")

        async def say(text: str, n: int) -> None:
            for ob in onebots.values():
                assert await ob.group_message(HELD, text, when=1_790_200_000 + n, message_id=n)

        def replies(prefix: str) -> Counter[str]:
            return Counter(
                s.text for ob in onebots.values() for s in ob.sent if s.text.startswith(prefix)
            )

        commands = 8
        for n in range(commands):
            await say(f"/aa explain {HELD}" + " " * n, n)  # distinct messages, same command
        await say("tick 1", 100)
        await wait_until(
            lambda: sum(replies(f"群 {HELD}").values()) >= commands,
            timeout=15.0,
            what="the commands answered",
        )
        await asyncio.sleep(0.5)  # no second reply to any of them, and no echo
        answered = [s for ob in onebots.values() for s in ob.sent]
        assert len(answered) == commands, [s.text for s in answered]
        assert all(s.text.startswith(f"群 {HELD}：保持空") for s in answered), answered
        # The other group is answered as usual, by its assignee alone.
        assignee = (await service.assignment())["702"]
        for ob in onebots.values():
            assert await ob.group_message("702", "tick 2", when=1_790_200_200, message_id=200)
        await wait_until(
            lambda: any(s.text.startswith("echo tick 2") for ob in onebots.values() for s in ob.sent),
            what="the echo in 702",
        )
        await asyncio.sleep(0.3)
        echoes = [s.text for ob in onebots.values() for s in ob.sent if s.text.startswith("echo")]
        assert echoes == [f"echo tick 2 from {assignee}"]
    finally:
        for ob in onebots.values():
            await ob.close()
        for p in processes.values():
            p.cleanup()
        service.stop()
        shutil.rmtree(service.dir, ignore_errors=True)
