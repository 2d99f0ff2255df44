"""A group without an assignee (here the excluded group 12, members 1001 and 1003): exactly one
bot handles each message, through the service's claim (one request per message and process)."""

from __future__ import annotations

import nonebot
from nonebug import App

from .helpers import BOTS, EXCLUDED, ROSTER, connect, deliver, group_message, settle
from .service import Service


async def test_excluded_group_is_claimed_by_exactly_one_bot(app: App, service: Service) -> None:
    from nonebot_plugin_auto_assign import runtime

    async with app.test_api() as ctx:
        bots = connect(ctx)
        assignment = await settle(service, BOTS)
        assert EXCLUDED not in assignment and EXCLUDED not in runtime.state.table
        for n in range(5):
            requests = runtime.stats.requests
            handlers = await deliver(bots, EXCLUDED, f"chat {n}")
            assert len(handlers) == 1, handlers
            assert handlers[0] in {"1001", "1003"}
            # The second bot used the first one's answer.
            assert runtime.stats.requests == requests + 1
        assert len(await deliver(bots, EXCLUDED, "/where")) == 1


async def test_one_after_the_other_and_across_processes(app: App, service: Service) -> None:
    """Sequential delivery, and a bot of another process asking the service for the same
    message: the claim was taken once, service-side."""
    from .plugins.record import HANDLED

    async with app.test_api() as ctx:
        bots = connect(ctx)
        await settle(service, BOTS)
        for first, second in (("1003", "1001"), ("1001", "1003")):
            HANDLED.clear()
            seq = 800_000 + int(first)
            for b in (first, second):
                await bots[b].handle_event(group_message(b, EXCLUDED, "one by one", seq=seq))
            assert [h[0] for h in HANDLED] == [first]
            event = group_message("1009", EXCLUDED, "one by one", seq=seq)
            other_process = await service.post(
                "/v1/ingress",
                {
                    "platform": "onebot",
                    "self_id": "1009",
                    "group_id": EXCLUDED,
                    "user_id": str(event.user_id),
                    "text": event.get_plaintext(),
                    "time": event.time,
                    "lane": "chat",
                },
            )
            assert other_process["handle"] is False, other_process
            assert "claimed by another bot" in other_process["reason"]


async def test_a_group_the_service_does_not_know(app: App, service: Service) -> None:
    """A group no bot reported yet (its list not refreshed): claimed, one bot."""
    async with app.test_api() as ctx:
        bots = connect(ctx)
        await settle(service, BOTS)
        for b in BOTS:  # every bot is in group 77 but the service has not been told
            ROSTER[b].add("77")
        assert "77" not in await service.assignment()
        assert len(await deliver(bots, "77", "new group")) == 1
        assert set(nonebot.get_bots()) == set(BOTS)
