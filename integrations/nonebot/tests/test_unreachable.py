"""The service down: the last known assignment still decides; groups that need a claim follow
AUTO_ASSIGN_WHEN_UNREACHABLE (answer: every bot, silent: none). Back up: the reporter sends
its full state again (the restarted service answered 409) and claims work again."""

from __future__ import annotations

import anyio
from nonebug import App

from .helpers import BOTS, EXCLUDED, connect, deliver, settle, wait_until
from .service import Service


async def test_service_down_then_back(app: App, service: Service) -> None:
    from nonebot_plugin_auto_assign import config, runtime

    async with app.test_api() as ctx:
        bots = connect(ctx)
        assignment = await settle(service, BOTS)
        full_states = runtime.reporter.full_states

        service.stop()
        await wait_until(lambda: not runtime.state.connected, what="stream down")

        # Assigned groups: the last known assignment, no request.
        for group, bot in assignment.items():
            assert await deliver(bots, group, "service down") == [bot], group

        # A group that needs a claim: the policy.
        config.auto_assign_when_unreachable = "answer"
        assert await deliver(bots, EXCLUDED, "anyone?") == ["1001", "1003"]
        unreachable = runtime.stats.unreachable
        config.auto_assign_when_unreachable = "silent"
        assert await deliver(bots, EXCLUDED, "anyone at all?") == []
        assert runtime.stats.unreachable == unreachable + 2

        service.start()
        await wait_until(lambda: runtime.state.connected, what="stream back")
        # The restarted service did not know the reporter (409): full state sent again.
        await wait_until(lambda: runtime.reporter.full_states > full_states, what="full state resent")
        await settle(service, BOTS)
        await anyio.sleep(config.auto_assign_retry_after)  # claims are tried again
        assert len(await deliver(bots, EXCLUDED, "back?")) == 1


async def test_policy_answer_when_the_service_never_answered(app: App, service: Service) -> None:
    """No assignment known at all (e.g. NoneBot started while the service was down): every
    group needs a claim, so the policy decides everywhere."""
    from nonebot_plugin_auto_assign import config, runtime

    async with app.test_api() as ctx:
        bots = connect(ctx)
        await settle(service, BOTS)
        service.stop()
        await wait_until(lambda: not runtime.state.connected, what="stream down")
        table, runtime.state.table = runtime.state.table, {}
        try:
            config.auto_assign_when_unreachable = "answer"
            assert await deliver(bots, "6", "hello?") == list(BOTS)
            config.auto_assign_when_unreachable = "silent"
            assert await deliver(bots, "6", "hello??") == []
        finally:
            runtime.state.table = table
    service.start()
