"""Three bots in one NoneBot, 12 groups: each group message is handled by its assignee only,
decided from the streamed assignment without a request to the service."""

from __future__ import annotations

from collections import Counter

from nonebug import App

from .helpers import BOTS, EXCLUDED, GROUPS, connect, deliver, group_message, settle
from .service import Service


async def test_each_group_message_is_handled_by_exactly_its_assignee(app: App, service: Service) -> None:
    from nonebot_plugin_auto_assign import runtime

    async with app.test_api() as ctx:
        bots = connect(ctx)
        assignment = await settle(service, BOTS)
        # 11 groups (12 is excluded) over three bots: loads 4, 4, 3.
        assert sorted(Counter(assignment.values()).values()) == [3, 4, 4]
        requests = runtime.stats.requests
        for group in GROUPS:
            if group == EXCLUDED:
                continue
            for text in ("hello", "/where", "/where now"):
                assert await deliver(bots, group, text) == [assignment[group]], (group, text)
        # Decided locally: not one claim was sent.
        assert runtime.stats.requests == requests


async def test_mentions_and_messages_of_fleet_bots(app: App, service: Service) -> None:
    async with app.test_api() as ctx:
        bots = connect(ctx)
        assignment = await settle(service, BOTS)
        group = "6"  # all three bots are members
        others = [b for b in BOTS if b != assignment[group]]
        # An @-mention of a fleet bot: that bot only, assignee or not.
        assert await deliver(bots, group, "hi", at=[others[0]]) == [others[0]]
        assert await deliver(bots, group, "hi both", at=others) == others
        # @-mentioning someone outside the fleet changes nothing.
        assert await deliver(bots, group, "hi you", at=["123456"]) == [assignment[group]]
        # A message sent by a bot of the fleet: nobody.
        assert await deliver(bots, group, "I am a bot", user=int(others[1])) == []
        # A command too.
        assert await deliver(bots, group, "/where", at=[others[1]]) == [others[1]]


async def test_nonebug_matcher_send_goes_to_the_assignee(app: App, service: Service) -> None:
    """The same through nonebug's own expectations: only the assignee sends its reply."""
    from .plugins.record import ping

    async with app.test_matcher(ping) as ctx:
        bots = connect(ctx)
        assignment = await settle(service, BOTS)
        group = "7"
        owner = assignment[group]
        for self_id in BOTS:
            event = group_message(self_id, group, "/ping", seq=900_001)
            ctx.receive_event(bots[self_id], event)
            if self_id == owner:  # a send by another bot would fail the test
                ctx.should_call_send(event, f"pong from {owner}", result=None, bot=bots[owner])
                ctx.should_finished(ping)


async def test_gate_commands_only(app: App, service: Service) -> None:
    """AUTO_ASSIGN_GATE=commands: chat reaches every bot (the fanout lane), commands (NoneBot's
    COMMAND_START × on_command) only the assignee."""
    from nonebot_plugin_auto_assign import config

    async with app.test_api() as ctx:
        bots = connect(ctx)
        assignment = await settle(service, BOTS)
        config.auto_assign_gate = "commands"
        try:
            assert await deliver(bots, "6", "just chatting") == list(BOTS)
            assert await deliver(bots, "6", "/where") == [assignment["6"]]
            assert await deliver(bots, "6", "/unknown-command") == list(BOTS)
        finally:
            config.auto_assign_gate = "all"


async def test_asking_the_service_for_every_message(app: App, service: Service) -> None:
    """AUTO_ASSIGN_DECIDE_LOCALLY=false (federate pools): the service decides each message,
    with the same outcome; the bots of this process share one request per message."""
    from nonebot_plugin_auto_assign import config, runtime

    async with app.test_api() as ctx:
        bots = connect(ctx)
        assignment = await settle(service, BOTS)
        config.auto_assign_decide_locally = False
        try:
            for group in ("2", "6", "10"):
                requests = runtime.stats.requests
                assert await deliver(bots, group, "ask") == [assignment[group]]
                assert runtime.stats.requests == requests + 1
            assert await deliver(bots, "6", "hi", at=["1003"]) == ["1003"]
        finally:
            config.auto_assign_decide_locally = True
