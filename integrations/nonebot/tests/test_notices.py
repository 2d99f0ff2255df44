"""The fleet source: the bots' own join and leave notices reach the service."""

from __future__ import annotations

from nonebug import App

from .helpers import BOTS, ROSTER, connect, deliver, notice, settle, wait_until
from .service import Service


async def test_own_join_and_leave_notices_are_reported(app: App, service: Service) -> None:
    from nonebot_plugin_auto_assign import runtime

    async with app.test_api() as ctx:
        bots = connect(ctx)
        await settle(service, BOTS)
        # Someone else joining a group is not the bot's business.
        await bots["1001"].handle_event(notice("1001", "14", "increase", user="555"))
        # 1002 is invited into group 13.
        ROSTER["1002"].add("13")
        await bots["1002"].handle_event(notice("1002", "13", "increase"))
        await wait_until(lambda: runtime.state.table.get("13") == "1002", what="13 assigned to 1002")
        assert (await service.assignment()).get("13") == "1002"
        assert await deliver(bots, "13", "welcome") == ["1002"]
        assert "14" not in await service.assignment()
        # ... and kicked out again: nobody is left in 13.
        ROSTER["1002"].discard("13")
        await bots["1002"].handle_event(notice("1002", "13", "decrease"))
        await wait_until(lambda: "13" not in runtime.state.table, what="13 unassigned")
        assert "13" not in await service.assignment()


async def test_a_join_while_the_group_list_is_fetched(app: App, service: Service) -> None:
    """A join notice that arrives while the bot's group list is still being fetched (the list
    may predate it) is applied to the list before the bot is reported."""
    import anyio
    import nonebot
    from nonebot.adapters.onebot.v11 import Adapter

    from nonebot_plugin_auto_assign import runtime

    from .helpers import RosterBot

    release = anyio.Event()

    class SlowBot(RosterBot):
        async def get_group_list(self, **kwargs: object) -> list[dict[str, object]]:  # type: ignore[override]
            groups = await super().get_group_list()  # the list before the join
            await release.wait()
            return groups

    async with app.test_api() as ctx:
        bots = connect(ctx, ["1001", "1002"])
        bots["1003"] = ctx.create_bot(base=SlowBot, adapter=nonebot.get_adapter(Adapter), self_id="1003")
        await wait_until(lambda: "1003" in runtime.reporter._fetching, what="1003's list requested")
        ROSTER["1003"].add("15")
        await bots["1003"].handle_event(notice("1003", "15", "increase"))
        release.set()
        await settle(service, BOTS)
        assert (await service.assignment()).get("15") == "1003"


async def test_the_periodic_resync_reports_a_changed_group_list(app: App, service: Service) -> None:
    """A join whose notice was missed is found by the next resync of the group lists."""
    from nonebot_plugin_auto_assign import resync_once, runtime

    async with app.test_api() as ctx:
        connect(ctx)
        await settle(service, BOTS)
        changes = runtime.reporter._seq
        await resync_once()  # nothing changed: nothing is queued
        assert runtime.reporter._seq == changes
        ROSTER["1002"].add("16")  # no notice
        await resync_once()
        await settle(service, BOTS)
        assert (await service.assignment()).get("16") == "1002"
