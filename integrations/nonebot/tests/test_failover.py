"""A bot disconnecting: its groups go to their new assignees once the service rebalances (the
trigger delay is 0 here); messages in between are claimed by exactly one bot."""

from __future__ import annotations

import nonebot
import pytest
from nonebug import App

from .helpers import BOTS, connect, deliver, disconnect, settle
from .service import Service


async def test_a_bot_disconnecting_hands_its_groups_over(app: App, service: Service) -> None:
    from nonebot_plugin_auto_assign import runtime

    async with app.test_api() as ctx:
        bots = connect(ctx)
        before = await settle(service, BOTS)
        gone = "1002"
        its_groups = sorted((g for g, b in before.items() if b == gone), key=int)
        assert its_groups

        disconnect(ctx, bots[gone])
        # At once, before the rebalance reached this process: still exactly one bot.
        assert len(await deliver(bots, its_groups[0], "right away")) == 1

        after = await settle(service, set(BOTS) - {gone})
        assert gone not in after.values()
        assert gone in runtime.state.ours and gone not in nonebot.get_bots()
        for group, bot in after.items():
            assert await deliver(bots, group, "after the failover") == [bot], group

        # The bot comes back: it is reported again and takes a share of the groups back.
        bots.update(connect(ctx, [gone]))
        again = await settle(service, BOTS)
        assert gone in again.values()
        for group, bot in again.items():
            assert await deliver(bots, group, "back") == [bot], group


async def test_message_before_the_disconnect_hook_ran(app: App, service: Service) -> None:
    """NoneBot drops a bot from get_bots() at once but runs the disconnect hooks later: a
    message arriving in between, in a group of that bot, is still handled by exactly one bot
    (the gate reports the bot offline itself before it claims)."""
    from nonebot_plugin_auto_assign import runtime

    async with app.test_api() as ctx:
        bots = connect(ctx)
        before = await settle(service, BOTS)
        gone = "1002"
        group = next(g for g, b in before.items() if b == gone)
        driver = nonebot.get_driver()
        del driver._bots[gone]  # the connection is gone, the hooks have not run
        requests = runtime.stats.requests
        assert len(await deliver(bots, group, "in between")) == 1
        assert runtime.stats.requests > requests  # claimed (both bots, one request or a few)
        # Now the hooks (nonebug would disconnect it again at the context's exit).
        disconnect(ctx, bots[gone])
        await settle(service, set(BOTS) - {gone})


async def test_a_stale_answer_naming_a_gone_bot_is_asked_again(
    app: App, service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service acknowledges a report before its engine applied it, so a claim right after
    may still name the bot that left. Here the service is never told (the report is held
    back): the gate asks again a few times, then follows the service's answer."""
    from nonebot_plugin_auto_assign import runtime
    from nonebot_plugin_auto_assign.gate import STALE_RETRIES

    async with app.test_api() as ctx:
        bots = connect(ctx)
        before = await settle(service, BOTS)
        gone = "1002"
        group = next(g for g, b in before.items() if b == gone)
        monkeypatch.setattr(runtime.reporter, "offline", lambda bot: None)
        del nonebot.get_driver()._bots[gone]
        requests = runtime.stats.requests
        assert await deliver(bots, group, "stale") == []
        assert runtime.stats.requests == requests + 1 + STALE_RETRIES
        monkeypatch.undo()
        disconnect(ctx, bots[gone])
        await settle(service, set(BOTS) - {gone})
