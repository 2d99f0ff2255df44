"""The gate's decision: should this bot handle this group message?

The rules are those of the service's ``POST /v1/ingress``, in its order:

1. a message sent by a bot of the fleet is not handled;
2. a message that @-mentions bots of the fleet is handled by the mentioned bots only;
3. (``fanout`` lane: every bot; see ``AUTO_ASSIGN_GATE=commands``)
4. a group with an online assignee: only the assignee handles;
5. otherwise (unassigned, excluded, assignee offline) the first claimer of the message wins.

A group an operator holds with no assignee (``aa hold``, a pin to ``null``) is answered by
nobody, as Koishi treats a channel with no assignee: only a mentioned bot (rule 2) gets
through, and the plugin's own ``aa`` commands, which one bot answers. The service's ingress
answers ``"kind": "held"`` (nobody) there, for commands too, so the plugin decides its own
commands with the owned gate instead (``POST /v1/gate/owned``, one gate per message: the first
bot to ask answers). The plugin knows the holds itself (``GET /v1/pins``, and every ingress
answer ``held``), so held groups are decided without a request.

Rules 1, 2 and 4 are decided here, from the streamed assignment, without a network round trip.
Rule 5 asks the service (``POST /v1/ingress``), once per message and process: the bots of this
process that received the same message share the answer.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import anyio
from nonebot import logger
from nonebot.adapters import Bot
from nonebot.adapters.onebot.v11 import GroupMessageEvent
from nonebot.rule import TrieRule

from .client import Rejected, ServiceClient, Unreachable
from .state import Assignment


class Verdict(NamedTuple):
    handle: bool
    reason: str


SENT_BY_FLEET_BOT = Verdict(False, "sent by a bot of the fleet")
MENTIONED = Verdict(True, "mentioned")
OTHER_BOT_MENTIONED = Verdict(False, "another bot of the fleet is mentioned")
ASSIGNEE = Verdict(True, "assignee")
ASSIGNED_TO_ANOTHER_BOT = Verdict(False, "assigned to another bot")
HELD = Verdict(False, "held by an operator: nobody answers")

UNASSIGNED = "unassigned channel"
ASSIGNEE_OFFLINE = "assignee offline"

HELD_REASON = "held with no assignee by an operator"
"""The service's ingress reason for a held group (``"kind": "held"``)."""
COMMAND_GATE_SECONDS = 60.0
"""How long the owned gate of one command in a held group is kept: longer than any delay
between two bots receiving the same message."""


def held_by_service(decision: dict[str, Any]) -> bool:
    """The service's ingress answered: the group is held, nobody handles it."""
    return decision.get("kind") == "held" or decision.get("reason") == HELD_REASON


def command_gate(key: Key) -> str:
    """The owned gate's name for one message (a command in a held group): a digest of its
    signature, so that each message has its own gate and the first bot to ask it answers."""
    digest = hashlib.sha256(repr(key).encode()).hexdigest()[:32]
    return f"auto_assign.command.{digest}"


def mentions(event: GroupMessageEvent) -> list[str]:
    """The QQ numbers @-mentioned in the message as it arrived (``original_message``: the
    adapter strips a leading or trailing @ of the receiving bot from ``message``)."""
    out = []
    for segment in event.original_message:
        if segment.type == "at":
            qq = str(segment.data.get("qq", ""))
            if qq.isdigit():
                out.append(qq)
    return out


def local_verdict(
    self_id: str, event: GroupMessageEvent, local: Mapping[str, Any], state: Assignment
) -> Verdict | str:
    """Rules 1, 2 and 4; a string (why) when the message needs the claim."""
    if state.is_fleet_bot(str(event.user_id), local):
        return SENT_BY_FLEET_BOT
    at = mentions(event)
    if at:
        mentioned = [b for b in at if state.is_fleet_bot(b, local)]
        if mentioned:
            return MENTIONED if self_id in mentioned else OTHER_BOT_MENTIONED
    assignee = state.table.get(str(event.group_id))
    if assignee is None:
        return UNASSIGNED
    if assignee == self_id:
        return ASSIGNEE
    if assignee in local:
        return ASSIGNED_TO_ANOTHER_BOT
    if assignee in state.ours:
        return ASSIGNEE_OFFLINE  # a bot of ours that is gone
    fleet = state.fleet
    if fleet is not None and not fleet.get(assignee, True):
        return ASSIGNEE_OFFLINE
    return ASSIGNED_TO_ANOTHER_BOT


def held(event: GroupMessageEvent, local: Mapping[str, Any], state: Assignment) -> bool:
    """Is the message in a group an operator holds (and without an assignee in the streamed
    table), mentioning no bot of the fleet?"""
    group = str(event.group_id)
    if group not in state.held or group in state.table:
        return False
    return not any(state.is_fleet_bot(b, local) for b in mentions(event))


def is_command(bot: Bot, event: GroupMessageEvent) -> bool:
    """Would the message trigger a registered ``on_command`` (``COMMAND_START`` × command)?
    NoneBot itself parses commands only after the event preprocessors."""
    return TrieRule.get_value(bot, event, {}).get("command") is not None


@dataclass
class Stats:
    local: int = 0
    """Decided from the streamed assignment."""
    requests: int = 0
    """``POST /v1/ingress`` requests sent."""
    shared: int = 0
    """Decided from another local bot's answer for the same message."""
    unreachable: int = 0
    """Decided by ``AUTO_ASSIGN_WHEN_UNREACHABLE``."""


Key = tuple[int, int, str, int]
Answer = tuple[str, "dict[str, Any] | None"]
"""(the bot that asked, the service's decision or ``None`` when it could not be reached)"""

KEPT_ANSWERS = 2048
STALE_RETRIES = 5


def counted_by_service(decision: dict[str, Any]) -> bool:
    """Did the service count this message for its channel weight when it decided it? It
    counts the decision that goes to the assignee or wins the claim: exactly one per message,
    whoever asked. A decision for another bot, or that lost the claim, is one of the others;
    a message that lost the claim was counted for its winner. A federate pool's decision
    (``local; outcome``), a mention or the fanout lane is not counted."""
    reason = str(decision.get("reason", ""))
    if ";" in reason:
        return False
    return reason == "assignee" or "won the claim" in reason or "claimed by another bot" in reason


class Claims:
    """Asks the service about messages the local assignment cannot decide."""

    def __init__(
        self,
        *,
        platform: str,
        plugin: str,
        when_unreachable: Callable[[], str],
        retry_after: Callable[[], float],
        stats: Stats,
    ) -> None:
        self.platform = platform
        self.plugin = plugin
        self._when_unreachable = when_unreachable
        self._retry_after = retry_after
        self.stats = stats
        self._flights: dict[Key, anyio.Event] = {}
        self._answers: OrderedDict[Key, Answer] = OrderedDict()
        self._command_flights: dict[Key, anyio.Event] = {}
        self._commands: OrderedDict[Key, tuple[str, bool | None]] = OrderedDict()
        """Commands in held groups → (the bot of this process that asked the gate, whether it
        was granted; ``None``: the service could not be asked)."""
        self._down_until = 0.0
        self._outage = False

    def answer(self, event: GroupMessageEvent) -> dict[str, Any] | None:
        """The service's decision recorded for this message (the last one asked), if any."""
        text = event.original_message.extract_plain_text()
        answer = self._answers.get((event.group_id, event.user_id, text, event.time))
        return None if answer is None else answer[1]

    def unreachable(self, why: str) -> Verdict:
        self.stats.unreachable += 1
        policy = self._when_unreachable()
        return Verdict(policy == "answer", f"service unreachable ({why}): {policy}")

    async def decide(
        self,
        client: ServiceClient | None,
        self_id: str,
        event: GroupMessageEvent,
        lane: str,
        before: Callable[[], Awaitable[object]] | None = None,
        gone: Callable[[str], bool] | None = None,
    ) -> Verdict:
        """``before`` runs before the request (the fleet reporter's flush, so the service
        has heard of a local bot's disconnection before it is asked). ``gone(bot)`` tells a bot
        known to be offline: an answer naming it as the assignee is stale (the service
        acknowledges a report before its engine has applied it) and is asked again, a few
        times within about a second."""
        text = event.original_message.extract_plain_text()
        key: Key = (event.group_id, event.user_id, text, event.time)
        answer = self._answers.get(key)
        if answer is None and (flight := self._flights.get(key)) is not None:
            await flight.wait()
            answer = self._answers.get(key)
        if answer is not None:
            shared = self._reuse(answer, self_id)
            if shared is not None:
                return shared
        if client is None or client.closed:
            return self.unreachable("not started")
        if time.monotonic() < self._down_until:
            return self.unreachable("recently failed")
        flight = self._flights[key] = anyio.Event()
        decision: dict[str, Any] | None = None
        try:
            if before is not None:
                await before()
            body = {
                "platform": self.platform,
                "self_id": self_id,
                "group_id": str(event.group_id),
                "user_id": str(event.user_id),
                "text": text,
                "time": event.time,
                "at": mentions(event),
                "lane": lane,
                "plugin": self.plugin,
            }
            for attempt in range(STALE_RETRIES + 1):
                self.stats.requests += 1
                decision = await client.ingress(body)
                named = decision.get("assignee")
                stale = (
                    gone is not None
                    and decision.get("reason") == "assigned to another bot"
                    and isinstance(named, str)
                    and gone(named)
                )
                if not stale or attempt == STALE_RETRIES:
                    break
                await anyio.sleep(0.05 * (attempt + 1))
            if self._outage:
                self._outage = False
                logger.info("auto-assign: the service answers claims again")
        except (Unreachable, Rejected) as e:
            # A refusal (a wrong token, say) is as good as no answer, and would be again.
            self._down_until = time.monotonic() + self._retry_after()
            if not self._outage:
                self._outage = True
                what = "refused" if isinstance(e, Rejected) else "could not reach"
                role = (
                    " (AUTO_ASSIGN_TOKEN's role may not claim: it needs report)"
                    if isinstance(e, Rejected) and e.forbidden
                    else ""
                )
                logger.warning(
                    f"auto-assign: a claim failed, the service {what} it ({e}){role}; applying "
                    f"AUTO_ASSIGN_WHEN_UNREACHABLE={self._when_unreachable()} until it answers"
                )
        finally:
            self._answers[key] = (self_id, decision)
            if len(self._answers) > KEPT_ANSWERS:
                self._answers.popitem(last=False)
            self._flights.pop(key, None)
            flight.set()
        if decision is None:
            return self.unreachable("claim failed")
        return Verdict(bool(decision.get("handle")), f"service: {decision.get('reason')}")

    async def command(
        self, client: ServiceClient | None, self_id: str, event: GroupMessageEvent
    ) -> Verdict:
        """The plugin's own command in a held group: the first bot of the fleet to take the
        message's owned gate answers it. One bot of this process asks; the others of this
        process that received the message follow its answer."""
        text = event.original_message.extract_plain_text()
        key: Key = (event.group_id, event.user_id, text, event.time)
        if key not in self._commands and (flight := self._command_flights.get(key)) is not None:
            await flight.wait()
        if (known := self._commands.get(key)) is not None:
            asker, taken = known
            self.stats.shared += 1
            if taken is None:
                return self.unreachable("gate failed")
            return Verdict(taken and asker == self_id, "held: command gate (shared)")
        if client is None or client.closed:
            return self.unreachable("not started")
        flight = self._command_flights[key] = anyio.Event()
        granted: bool | None = None
        try:
            self.stats.requests += 1
            granted = await client.owned_gate(
                command_gate(key), str(event.group_id), self_id, COMMAND_GATE_SECONDS
            )
        except (Unreachable, Rejected) as e:
            logger.warning(f"auto-assign: the command gate of a held group failed ({e})")
        finally:
            self._commands[key] = (self_id, granted)
            if len(self._commands) > KEPT_ANSWERS:
                self._commands.popitem(last=False)
            self._command_flights.pop(key, None)
            flight.set()
        if granted is None:
            return self.unreachable("gate failed")
        outcome = "taken" if granted else "taken by another bot"
        return Verdict(granted, f"held: command gate {outcome}")

    def _reuse(self, answer: Answer, self_id: str) -> Verdict | None:
        """What another bot's answer for the same message means for ``self_id``; ``None``
        when it says nothing about it (then ``self_id`` asks itself)."""
        asker, decision = answer
        if decision is None:
            self.stats.shared += 1
            return self.unreachable("claim failed")
        reason = str(decision.get("reason", ""))
        if asker == self_id:
            verdict = Verdict(bool(decision.get("handle")), f"service: {reason}")
        elif ";" in reason:
            return None  # a federate pool's decision: ask for this bot
        elif reason in ("assignee", "assigned to another bot"):
            me = decision.get("assignee") == self_id
            verdict = Verdict(me, f"service (via bot {asker}): {reason}")
        elif "won the claim" in reason or "claimed by another bot" in reason:
            verdict = Verdict(False, f"service (via bot {asker}): claimed")
        elif reason == "sent by a bot of the fleet":
            verdict = SENT_BY_FLEET_BOT
        elif held_by_service(decision):
            verdict = Verdict(False, f"service (via bot {asker}): {reason}")
        else:
            return None
        self.stats.shared += 1
        return verdict
