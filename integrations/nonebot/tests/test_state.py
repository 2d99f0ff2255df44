"""The stream's ``presence`` events in the gate's state, without the service: an assignee known
offline leaves its groups to the claim, and a read of the fleet that was under way when the
event came does not undo it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .helpers import group_message

if TYPE_CHECKING:  # the plugin is imported once NoneBot is initialised
    from nonebot_plugin_auto_assign.state import Assignment

HERE = {"1001": object()}
"""The bots connected to this process."""


def _state() -> Assignment:
    from nonebot_plugin_auto_assign.state import Assignment

    state = Assignment("onebot")
    state.snapshot(1, {"onebot": {"6": "2001"}})
    state.set_fleet([{"platform": "onebot", "bot": "2001", "online": True}])
    return state


def _verdict(state: Assignment) -> object:
    from nonebot_plugin_auto_assign.gate import local_verdict

    return local_verdict("1001", group_message("1001", "6", "hi"), HERE, state)


def test_an_assignee_heard_offline_leaves_its_group_to_the_claim() -> None:
    from nonebot_plugin_auto_assign.gate import ASSIGNED_TO_ANOTHER_BOT, ASSIGNEE_OFFLINE

    state = _state()
    assert _verdict(state) == ASSIGNED_TO_ANOTHER_BOT
    state.presence("onebot", "2001", False)
    assert _verdict(state) == ASSIGNEE_OFFLINE
    state.presence("telegram", "2001", True)  # another platform's bot: not this one
    assert _verdict(state) == ASSIGNEE_OFFLINE
    state.presence("onebot", "2001", True)
    assert _verdict(state) == ASSIGNED_TO_ANOTHER_BOT
    # The stream moves the group on: decided from the table again.
    state.presence("onebot", "2001", False)
    assert state.apply(2, "onebot", {"6": "1001"})
    assert _verdict(state).handle  # type: ignore[attr-defined]


def test_a_fleet_read_under_way_does_not_undo_a_presence_event() -> None:
    from nonebot_plugin_auto_assign.gate import ASSIGNEE_OFFLINE

    state = _state()
    since = state.presences
    state.presence("onebot", "2001", False)  # while GET /v1/bots is under way
    state.set_fleet([{"platform": "onebot", "bot": "2001", "online": True}], since)
    assert state.fleet == {"2001": False}
    assert _verdict(state) == ASSIGNEE_OFFLINE
    # A read that started after the event is newer: it is believed, and the event forgotten.
    state.set_fleet([{"platform": "onebot", "bot": "2001", "online": True}], state.presences)
    assert state.fleet == {"2001": True} and state.heard == {}


def test_presence_before_the_first_read_of_the_fleet() -> None:
    from nonebot_plugin_auto_assign.gate import ASSIGNED_TO_ANOTHER_BOT, ASSIGNEE_OFFLINE
    from nonebot_plugin_auto_assign.state import Assignment

    state = Assignment("onebot")
    state.snapshot(1, {"onebot": {"6": "2001"}})
    assert _verdict(state) == ASSIGNED_TO_ANOTHER_BOT  # nothing known of 2001: trusted
    state.presence("onebot", "2001", False)
    assert state.fleet == {"2001": False}
    assert _verdict(state) == ASSIGNEE_OFFLINE
    assert state.is_fleet_bot("2001", HERE)  # its messages are not answered either
