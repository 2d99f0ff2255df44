"""The plugin's commands: ``aa`` (Chinese ``分配``) and its subcommands, one NoneBot
``on_command``.

==============================================  ==============  ==========================
subcommand                                      alias           who
==============================================  ==============  ==========================
``aa`` / ``aa help``                            ``帮助``         everyone
``aa explain [group]``                          ``解释``         reading (see below)
``aa status``                                   ``状态``         reading
``aa pins``                                     ``固定列表``     reading
``aa drains``                                   ``排空列表``     reading
``aa rebalance --dry-run`` / ``aa dry-run``     ``预演``         reading
``aa rebalance``                                ``重新分配``     changing: ``SUPERUSER``
``aa pin [bot] [-g group] [--until] [--note]``  ``固定``         changing
``aa hold [-g group] [--until] [--note]``       ``保持空``       changing
``aa unpin [-g group]``                         ``取消固定``     changing
``aa drain <bot> [--until] [--note]``           ``排空``         changing
``aa undrain <bot>``                            ``恢复``         changing
==============================================  ==============  ==========================

Reading follows ``AUTO_ASSIGN_READ_PERMISSION`` (everyone, admins or superusers).

Options: ``-g``/``--group``/``--群`` takes one word; ``--until``/``--直到`` and
``--note``/``--备注`` take every word up to the next option (``--until 1d 12h``); ``--x=value``
works too, and so does ``——`` (a Chinese input method's ``--``). Positional arguments come
before the options.

A command in a group goes through the gate like any group message (the event preprocessor):
only the group's bot answers it. In a group an operator holds, the gate lets the plugin's own
commands through to one bot (the claim), so an operator can still ask and release there. With
the gate off (``AUTO_ASSIGN_ENABLED=false``) these commands still ask the gate, in their rule,
so that one bot answers them.

A change the service refuses is answered in words (an unknown group or bot, a bot that is not
a member, a malformed ``until``, a token whose role may not change anything), recognised by the
refusal's ``code`` (by its English words from an older service); a follower's refusal is sent
once more, to the leader it names (``client.py``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from nonebot import logger, on_command
from nonebot.adapters import Bot, Event, Message
from nonebot.adapters.onebot.v11 import GROUP_ADMIN, GROUP_OWNER, GroupMessageEvent
from nonebot.consts import (
    CMD_ARG_KEY,
    CMD_KEY,
    CMD_START_KEY,
    CMD_WHITESPACE_KEY,
    PREFIX_KEY,
    RAW_CMD_KEY,
)
from nonebot.matcher import Matcher
from nonebot.params import CommandArg
from nonebot.permission import SUPERUSER
from nonebot.rule import TrieRule
from nonebot.typing import T_State

from . import config, decide, driver, runtime
from .client import Rejected, ServiceClient, Unreachable
from .i18n import LANGUAGES, Texts

COMMAND = "aa"
ALIAS = "分配"
MAX_LISTED = 30
"""Bots (or pins, drains) listed in one reply at most (the rest are counted)."""
MAX_MOVES = 10
"""Moves of a dry run listed in one reply at most."""

Access = Literal["public", "read", "change"]

OPTIONS: dict[str, str] = {
    "-g": "group",
    "--group": "group",
    "--群": "group",
    "--until": "until",
    "--直到": "until",
    "--note": "note",
    "--备注": "note",
    "--dry-run": "dry-run",
    "--预演": "dry-run",
}
"""Every option as it may be written → its name."""
ONE_WORD = frozenset({"group"})
"""Options whose value is one word."""
VALUED = frozenset({"group", "until", "note"})
"""Options that take a value (the others are flags)."""


@dataclass
class Call:
    """One use of a subcommand."""

    bot: Bot
    event: Event
    texts: Texts
    cmd: str
    """The command as it was written, with its start: ``/aa`` or ``/分配``."""
    alias: str
    """The other name, with the same start."""
    sub: Sub
    args: list[str]
    options: dict[str, str] = field(default_factory=dict)
    """Option name → its value (``""`` for a flag)."""

    @property
    def command(self) -> str:
        return f"{self.cmd} {self.sub.name}"

    def usage(self) -> str:
        return self.texts(f"usage.{self.sub.name}", cmd=self.cmd)

    @property
    def here(self) -> str | None:
        """The group the command was sent in (``None``: a private chat)."""
        if isinstance(self.event, GroupMessageEvent):
            return str(self.event.group_id)
        return None


@dataclass(frozen=True)
class Sub:
    name: str
    aliases: tuple[str, ...]
    run: Callable[[Call], Awaitable[str]]
    access: Access | Callable[[Call], Access] = "read"
    """``public``: anyone; ``read``: ``AUTO_ASSIGN_READ_PERMISSION``; ``change``: superusers."""
    max_args: int = 0
    min_args: int = 0
    options: frozenset[str] = frozenset()
    """The options it takes (their names); any other is refused."""

    def access_for(self, call: Call) -> Access:
        return self.access(call) if callable(self.access) else self.access


# ------------------------------------------------------------------------------ the service
def _client() -> ServiceClient:
    client = runtime.client
    if client is None or client.closed:
        raise Unreachable("the plugin has not started")
    return client


def _service_error(t: Texts, e: Exception) -> str:
    if isinstance(e, Rejected):
        if e.status == 401:
            return t("rejected.token", error=e)
        if e.forbidden:
            return t("rejected.forbidden", error=e.error)
        return t("rejected", error=e)
    return t("unreachable", error=e)


def refusal_code(e: Rejected) -> str | None:
    """The refusal's stable ``code``; from a service older than the codes, recognised in its
    English words (the same refusals, the same codes)."""
    if e.code is not None:
        return e.code
    error = e.error
    if e.status == 403:
        return "forbidden"
    if e.status == 404:
        if error.startswith("unknown platform"):
            return "unknown_platform"
        if error.startswith("no bot of the fleet reported being in"):
            return "unknown_channel"
        if error.startswith("no bot ") and error.endswith(" is known"):
            return "unknown_bot"
        if error.endswith((" has no pin", " has no drain")):
            return "nothing_to_end"
    elif e.status == 409:
        if e.leader is not None:
            return "following"
        if "; its members: " in error:
            return "not_a_member"
    elif e.status == 400:
        if error.startswith("until:"):
            return "invalid_until"
        if error.startswith("note:"):
            return "invalid_note"
        if error.startswith("bot:"):
            return "invalid_bot"
    return None


def _members(e: Rejected) -> list[str]:
    """A ``not_a_member`` refusal's members: its ``members``, else read from its words."""
    members = e.body.get("members")
    if isinstance(members, list):
        return [str(m) for m in members]
    marker = "; its members: "
    if marker not in e.error:
        return []
    return [m.strip() for m in e.error.split(marker, 1)[1].split(",") if m.strip()]


def _refused(
    t: Texts,
    e: Exception,
    *,
    group: str | None = None,
    bot: str | None = None,
    until: str | None = None,
) -> str:
    """The service's refusal of an operator's request, in words: by its ``code`` (a service
    older than the codes: by its English words, ``refusal_code``); an unknown one is shown as
    the service gave it."""
    if not isinstance(e, Rejected) or e.status == 401:
        return _service_error(t, e)
    code = refusal_code(e)
    if code == "forbidden":
        return t("rejected.forbidden", error=e.error)
    if code == "unknown_platform":
        return t("refused.platform", platform=config.auto_assign_platform)
    if code == "unknown_channel":
        return t("refused.unknown_group", group=group)
    if code == "unknown_bot":
        return t("refused.unknown_bot", bot=bot)
    if code == "nothing_to_end":
        # unpin names a group, undrain a bot.
        return t("refused.no_pin", group=group) if group is not None else t(
            "refused.no_drain", bot=bot
        )
    if code == "following":
        return t("refused.follower", error=e.error)
    if code == "not_a_member":
        return t("refused.not_member", bot=bot, group=group, members=t.join(_members(e)))
    if code == "invalid_until":
        return t("refused.until", until=until)
    if code == "invalid_note":
        return t("refused.note", error=e.error.removeprefix("note:").strip())
    if code == "invalid_bot":
        return t("bad_bot", bot=bot)
    if e.status == 404 and e.error == "no such route":
        return t("refused.old_service", error=e)
    return t("rejected", error=e)


def _change_reply(
    t: Texts, reply: str, via: str | None, answer: dict[str, Any] | None = None
) -> str:
    """A change's reply, with a line when the leader made it because the configured service
    follows, and one when the service put it in force but could not store it within 5 s (202,
    ``stored: false``: it is lost if the service stops before its database answers)."""
    if via is not None:
        reply = f"{reply}\n{t('via_leader', api=via)}"
    if answer is not None and answer.get("stored") is False:
        reply = f"{reply}\n{t('not_stored')}"
    return reply


def _listed(t: Texts, items: list[str]) -> str:
    if len(items) > MAX_LISTED:
        return t.join([*items[:MAX_LISTED], t("list.more", n=len(items))])
    return t.join(items)


def _details(t: Texts, until: Any = None, note: Any = None) -> str:
    """``，至 …，备注：…`` for an override's end and note; ``""`` when it has neither."""
    parts = []
    if isinstance(until, str) and until:
        parts.append(t("detail.until", when=t.when(until)))
    if isinstance(note, str) and note:
        parts.append(t("detail.note", note=note))
    return t("detail.wrap", details=t("detail.sep").join(parts)) if parts else ""


# ------------------------------------------------------------------------------ arguments
def _is_number(word: str) -> bool:
    return word.isascii() and word.isdigit()


def _target_group(call: Call) -> tuple[str | None, str | None]:
    """The group a command is about: ``-g``, else a positional argument (for subcommands
    without another), else the group it was sent in. ``(group, None)`` or ``(None, reply)``."""
    t = call.texts
    group = call.options.get("group")
    if group is None and call.args and call.sub.name != "pin":
        group = call.args[0]
    if group is None:
        group = call.here
    if group is None:
        return None, t("explain.need_group", usage=call.usage())
    if not _is_number(group):
        return None, t("explain.bad_group", group=group)
    return group, None


def _release(call: Call, group: str) -> str:
    """How to release a pin or hold of ``group``, from where the command was sent."""
    if group == call.here:
        return f"{call.cmd} unpin"
    return f"{call.cmd} unpin -g {group}"


# ------------------------------------------------------------------------------ reading
async def _help(call: Call) -> str:
    return help_text(call.texts, call.cmd, call.alias, config.auto_assign_read_permission)


def help_text(t: Texts, cmd: str, alias: str, readers: str) -> str:
    lines = [t("help.title", cmd=cmd, alias=alias)]
    for sub in SUBCOMMANDS:
        usage = t(f"usage.{sub.name}", cmd=cmd)
        aliases = t.join(list(sub.aliases))
        lines.append(t("help.line", usage=usage, desc=t(f"desc.{sub.name}"), aliases=aliases))
    lines.append(t("help.who", readers=t(f"who.{readers}")))
    return "\n".join(lines)


async def _explain(call: Call) -> str:
    t = call.texts
    if call.args:
        group = call.args[0]
    elif call.here is not None:
        group = call.here
    else:
        return t("explain.need_group", usage=call.usage())
    if not _is_number(group):
        return t("explain.bad_group", group=group)
    platform = config.auto_assign_platform
    try:
        client = _client()
        explanation = await client.explain(platform, group)
        assignment = await client.assignment(platform, group)
    except (Unreachable, Rejected) as e:
        local = runtime.state.table.get(group)
        if local is None:
            after = t("explain.local_none", group=group)
        else:
            after = t("explain.local", group=group, bot=local)
        return f"{_service_error(t, e)}\n{after}"
    members: list[dict[str, Any]] = list(explanation.get("members") or [])
    online = {str(m.get("bot")): bool(m.get("online")) for m in members}
    assignee = explanation.get("assignee")
    reason = str(explanation.get("reason", ""))
    pin = explanation.get("pin")
    pin = pin if isinstance(pin, dict) else None
    details = _details(t, pin.get("until"), pin.get("note")) if pin else ""
    if assignee is None and reason == "held":
        head = t("explain.held", group=group, cmd=call.cmd)
    elif assignee is None:
        head = t("explain.nobody", group=group)
    elif online.get(str(assignee), True):
        head = t("explain.assignee", group=group, bot=assignee)
    else:
        head = t("explain.assignee_offline", group=group, bot=assignee)
    if assignee is not None and assignment.get("committed") is False:
        head += t("explain.not_committed")
    key = f"reason.{reason}" if f"reason.{reason}" in t.catalogue else "reason.other"
    why = t(key, platform=platform, text=explanation.get("text", reason), details=details)
    lines = [head, t("explain.reason", reason=why)]
    if pin is not None and pin.get("bot") is not None and reason != "operator_pin":
        # Pinned, but the pinned bot cannot answer now: the plan serves the group meanwhile.
        lines.append(t("explain.pin_waiting", bot=pin.get("bot"), details=details))
    drained = [str(b) for b in explanation.get("drained") or []]
    if assignee is not None and str(assignee) in drained:
        lines.append(t("explain.assignee_drained", bot=assignee))
    elif drained:
        lines.append(t("explain.drained", bots=t.join(drained)))
    if members:
        listed = [
            t("explain.member", bot=m.get("bot"), load=m.get("load"))
            if m.get("online")
            else t("explain.member_offline", bot=m.get("bot"))
            for m in members
        ]
        lines.append(t("explain.members", members=_listed(t, listed)))
    return "\n".join(lines)


async def _status(call: Call) -> str:
    t = call.texts
    platform = config.auto_assign_platform
    state = runtime.state
    stream = t("status.stream_up" if state.connected else "status.stream_down")
    lines = []
    status: dict[str, Any] | None = None
    try:
        client = _client()
        status = await client.status()
        bots = await client.bots()
    except (Unreachable, Rejected) as e:
        if isinstance(e, Rejected):
            lines.append(t("status.service_refused", error=e))
        else:
            lines.append(t("status.service_down", error=e))
        lines.append(t("status.local_table", stream=stream, groups=len(state.table)))
    else:
        lines.append(t("status.service_ok", stream=stream))
        counts = (status.get("platforms") or {}).get(platform)
        if counts:
            lines.append(
                t(
                    "status.counts",
                    platform=platform,
                    assigned=counts.get("assigned", 0),
                    unassigned=counts.get("unassigned", 0),
                    excluded=counts.get("excluded", 0),
                )
            )
        loads = [
            t("status.load", bot=b.get("bot"), load=b.get("load", 0))
            if b.get("online")
            else t("status.load_offline", bot=b.get("bot"))
            for b in bots
            if b.get("platform") == platform
        ]
        lines.append(t("status.loads", loads=_listed(t, loads)) if loads else t("status.no_bots"))
    ours = sorted(driver.bots, key=lambda b: (len(b), b))
    reporter = runtime.reporter.name
    if ours:
        lines.append(t("status.ours", reporter=reporter, bots=_listed(t, ours)))
    else:
        lines.append(t("status.ours_none", reporter=reporter))
    if status is not None:
        run = status.get("last_run")
        if isinstance(run, dict):
            ago = time.time() - float(run.get("finished_at_ms", 0)) / 1000
            lines.append(
                t(
                    "status.last_run",
                    number=run.get("number"),
                    causes=t.causes(str(run.get("causes", ""))),
                    ago=t.ago(ago),
                    forced=run.get("moved_forced", 0),
                    voluntary=run.get("moved_voluntary", 0),
                )
            )
        else:
            lines.append(t("status.no_run"))
        pins = [p for p in status.get("pins") or [] if p.get("platform") == platform]
        drains = [d for d in status.get("drains") or [] if d.get("platform") == platform]
        holds = sum(1 for p in pins if p.get("bot") is None)
        if pins or drains:
            lines.append(
                t(
                    "status.overrides",
                    pins=len(pins) - holds,
                    holds=holds,
                    drains=len(drains),
                    cmd=call.cmd,
                )
            )
    return "\n".join(lines)


async def _pins(call: Call) -> str:
    t = call.texts
    platform = config.auto_assign_platform
    try:
        pins = await _client().pins()
    except (Unreachable, Rejected) as e:
        return _refused(t, e)
    pins = [p for p in pins if p.get("platform") == platform]
    if not pins:
        return t("pins.none")
    pins.sort(key=lambda p: (len(str(p.get("channel"))), str(p.get("channel"))))
    lines = [t("pins.title", n=len(pins))]
    for p in pins[:MAX_LISTED]:
        group, bot, assignee = p.get("channel"), p.get("bot"), p.get("assignee")
        details = _details(t, p.get("until"), p.get("note"))
        if bot is None:
            lines.append(t("pins.held", group=group, details=details))
        elif p.get("state") == "waiting":
            key = "pins.waiting" if assignee is not None else "pins.waiting_nobody"
            lines.append(t(key, group=group, bot=bot, assignee=assignee, details=details))
        else:
            lines.append(t("pins.in_force", group=group, bot=bot, details=details))
    if len(pins) > MAX_LISTED:
        lines.append(t("list.more", n=len(pins)))
    lines.append(t("pins.release", cmd=call.cmd))
    return "\n".join(lines)


async def _drains(call: Call) -> str:
    t = call.texts
    platform = config.auto_assign_platform
    try:
        drains = await _client().drains()
    except (Unreachable, Rejected) as e:
        return _refused(t, e)
    drains = [d for d in drains if d.get("platform") == platform]
    if not drains:
        return t("drains.none")
    drains.sort(key=lambda d: (len(str(d.get("bot"))), str(d.get("bot"))))
    lines = [t("drains.title", n=len(drains))]
    for d in drains[:MAX_LISTED]:
        details = _details(t, d.get("until"), d.get("note"))
        lines.append(t("drains.line", bot=d.get("bot"), kept=d.get("kept", 0), details=details))
    if len(drains) > MAX_LISTED:
        lines.append(t("list.more", n=len(drains)))
    lines.append(t("drains.release", cmd=call.cmd))
    return "\n".join(lines)


def _number(value: Any) -> str:
    """A Σ as the service gave it: an integer as such, a fraction with one decimal."""
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.1f}" if math.isfinite(value) else str(value)
    if isinstance(value, (int, float)):
        return str(int(value))
    return "?"


async def _dry_run(call: Call) -> str:
    t = call.texts
    platform = config.auto_assign_platform
    try:
        run = await _client().dry_run()
    except (Unreachable, Rejected) as e:
        return _refused(t, e)
    plan = next(
        (p for p in run.get("platforms") or [] if p.get("platform") == platform), None
    )
    if plan is None:
        return t("dry.no_platform", platform=platform)
    moves: list[dict[str, Any]] = list(plan.get("moves") or [])
    lines = []
    if moves:
        lines.append(
            t(
                "dry.title",
                moves=len(moves),
                forced=plan.get("forced", 0),
                voluntary=plan.get("voluntary", 0),
            )
        )
        nobody = t("dry.nobody")
        for m in moves[:MAX_MOVES]:
            kind, rule = str(m.get("kind")), str(m.get("rule"))
            lines.append(
                t(
                    "dry.move",
                    group=m.get("channel"),
                    source=m.get("from") or nobody,
                    target=m.get("to") or nobody,
                    kind=t.catalogue.get(f"kind.{kind}", kind),
                    rule=t.catalogue.get(f"rule.{rule}", rule),
                )
            )
        if len(moves) > MAX_MOVES:
            lines.append(t("dry.more", n=len(moves) - MAX_MOVES))
    else:
        lines.append(t("dry.none"))
    loads: list[dict[str, Any]] = list(plan.get("loads") or [])
    if loads:
        lines.append(t("dry.loads"))
        for load in loads[:MAX_LISTED]:
            marks = []
            if not load.get("online", True):
                marks.append(t("dry.offline"))
            if load.get("drained"):
                marks.append(t("dry.drained"))
            lines.append(
                t(
                    "dry.load",
                    bot=load.get("bot"),
                    before=load.get("before", 0),
                    after=load.get("after", 0),
                    marks=t("dry.marks", marks=t.join(marks)) if marks else "",
                )
            )
        if len(loads) > MAX_LISTED:
            lines.append(t("list.more", n=len(loads)))
    before, after = plan.get("before") or {}, plan.get("after") or {}
    lines.append(
        t("dry.sumsq", before=_number(before.get("sumSq")), after=_number(after.get("sumSq")))
    )
    if before.get("weightedSumSq") is not None:
        lines.append(
            t(
                "dry.weighted",
                before=_number(before.get("weightedSumSq")),
                after=_number(after.get("weightedSumSq")),
            )
        )
    lines.append(t("dry.nothing_changed" if not moves else "dry.apply", cmd=call.cmd))
    return "\n".join(lines)


# ------------------------------------------------------------------------------ changing
async def _rebalance(call: Call) -> str:
    if "dry-run" in call.options:
        return await _dry_run(call)
    t = call.texts
    try:
        via = await _client().rebalance()
    except Rejected as e:
        if e.leader is not None or e.code == "following":
            return t("rebalance.follower", error=e.error)
        return _service_error(t, e)
    except Unreachable as e:
        return _service_error(t, e)
    return _change_reply(t, t("rebalance.requested", cmd=call.cmd), via)


async def _pin(call: Call) -> str:
    t = call.texts
    group, refusal = _target_group(call)
    if group is None:
        return refusal or ""
    bot = call.args[0] if call.args else call.bot.self_id
    if not _is_number(bot):
        return t("bad_bot", bot=bot)
    until, note = call.options.get("until"), call.options.get("note")
    try:
        pin, via = await _client().pin(config.auto_assign_platform, group, bot, until, note)
    except (Unreachable, Rejected) as e:
        return _refused(t, e, group=group, bot=bot, until=until)
    runtime.state.held.discard(group)
    details = _details(t, pin.get("until"), pin.get("note"))
    reply = t("pin.done", group=group, bot=pin.get("bot", bot), details=details)
    return _change_reply(t, f"{reply}\n{t('release', how=_release(call, group))}", via, pin)


async def _hold(call: Call) -> str:
    t = call.texts
    group, refusal = _target_group(call)
    if group is None:
        return refusal or ""
    until, note = call.options.get("until"), call.options.get("note")
    try:
        pin, via = await _client().pin(config.auto_assign_platform, group, None, until, note)
    except (Unreachable, Rejected) as e:
        return _refused(t, e, group=group, until=until)
    runtime.state.held.add(group)
    details = _details(t, pin.get("until"), pin.get("note"))
    reply = t("hold.done", group=group, details=details, cmd=call.cmd)
    return _change_reply(t, f"{reply}\n{t('release', how=_release(call, group))}", via, pin)


async def _unpin(call: Call) -> str:
    t = call.texts
    group, refusal = _target_group(call)
    if group is None:
        return refusal or ""
    try:
        pin, via = await _client().unpin(config.auto_assign_platform, group)
    except (Unreachable, Rejected) as e:
        return _refused(t, e, group=group)
    runtime.state.held.discard(group)
    bot = pin.get("bot")
    if bot is None:
        return _change_reply(t, t("unpin.done_hold", group=group), via, pin)
    return _change_reply(t, t("unpin.done", group=group, bot=bot), via, pin)


async def _drain(call: Call) -> str:
    t = call.texts
    bot = call.args[0]
    if not _is_number(bot):
        return t("bad_bot", bot=bot)
    until, note = call.options.get("until"), call.options.get("note")
    try:
        drain, via = await _client().drain(config.auto_assign_platform, bot, until, note)
    except (Unreachable, Rejected) as e:
        return _refused(t, e, bot=bot, until=until)
    details = _details(t, drain.get("until"), drain.get("note"))
    reply = t("drain.done", bot=bot, details=details)
    release = t("release", how=f"{call.cmd} undrain {bot}")
    return _change_reply(t, f"{reply}\n{release}", via, drain)


async def _undrain(call: Call) -> str:
    t = call.texts
    bot = call.args[0]
    if not _is_number(bot):
        return t("bad_bot", bot=bot)
    try:
        drain, via = await _client().undrain(config.auto_assign_platform, bot)
    except (Unreachable, Rejected) as e:
        return _refused(t, e, bot=bot)
    return _change_reply(t, t("undrain.done", bot=bot), via, drain)


def _rebalance_access(call: Call) -> Access:
    return "read" if "dry-run" in call.options else "change"


SUBCOMMANDS: tuple[Sub, ...] = (
    Sub("explain", ("解释",), _explain, max_args=1),
    Sub("status", ("状态",), _status),
    Sub("pins", ("固定列表",), _pins),
    Sub("drains", ("排空列表",), _drains),
    Sub(
        "rebalance",
        ("重新分配",),
        _rebalance,
        access=_rebalance_access,
        options=frozenset({"dry-run"}),
    ),
    Sub("dry-run", ("预演",), _dry_run),
    Sub(
        "pin",
        ("固定",),
        _pin,
        access="change",
        max_args=1,
        options=frozenset({"group", "until", "note"}),
    ),
    Sub(
        "hold",
        ("保持空",),
        _hold,
        access="change",
        max_args=1,
        options=frozenset({"group", "until", "note"}),
    ),
    Sub(
        "unpin",
        ("取消固定", "解除"),
        _unpin,
        access="change",
        max_args=1,
        options=frozenset({"group"}),
    ),
    Sub(
        "drain",
        ("排空",),
        _drain,
        access="change",
        min_args=1,
        max_args=1,
        options=frozenset({"until", "note"}),
    ),
    Sub(
        "undrain",
        ("恢复", "取消排空"),
        _undrain,
        access="change",
        min_args=1,
        max_args=1,
    ),
    Sub("help", ("帮助",), _help, access="public"),
)
_NAMES: dict[str, Sub] = {
    name.lower(): sub for sub in SUBCOMMANDS for name in (sub.name, *sub.aliases)
}


# ------------------------------------------------------------------------------ parsing
@dataclass
class Parsed:
    sub: Sub | None
    """``None``: no such subcommand (``args`` holds the word)."""
    args: list[str] = field(default_factory=list)
    options: dict[str, str] = field(default_factory=dict)
    written: dict[str, str] = field(default_factory=dict)
    """Option name → the option as it was written (for the replies)."""
    unknown: str | None = None
    """An option no subcommand has, as written."""
    missing: str | None = None
    """An option written without its value."""


def _option(word: str) -> tuple[str, str | None] | None:
    """``(name as written, value after =)`` when ``word`` is written as an option."""
    if word.startswith("——"):
        word = "--" + word[2:]
    if not word.startswith("-") or len(word) < 2 or _is_number(word[1:]):
        return None
    name, eq, value = word.partition("=")
    return name.lower(), (value if eq else None)


def parse(text: str) -> Parsed:
    """The subcommand, its positional arguments and its options; no words: ``help``. The
    subcommand may be glued to what follows (``/分配状态``, ``/分配解释123``)."""
    words = text.split()
    if not words:
        return Parsed(_NAMES["help"])
    first, rest = words[0], words[1:]
    sub = _NAMES.get(first.lower())
    if sub is None:
        glued = _glued(first)
        if glued is None:
            return Parsed(None, [first])
        sub, tail = glued
        rest = [tail, *rest]
    parsed = Parsed(sub)
    current: str | None = None  # the option whose value is being read
    for word in rest:
        option = _option(word)
        name = OPTIONS.get(option[0]) if option is not None else None
        if option is not None and name is None and current is None:
            parsed.unknown = parsed.unknown or option[0]
            continue
        if name is None:
            if current is None:
                parsed.args.append(word)
            else:
                value = parsed.options[current]
                parsed.options[current] = f"{value} {word}" if value else word
                if current in ONE_WORD:
                    current = None
            continue
        assert option is not None
        parsed.written[name] = option[0]
        if name not in VALUED:
            parsed.options[name] = ""
            current = None
        elif option[1] is not None:
            parsed.options[name] = option[1]
            current = None if name in ONE_WORD else name
        else:
            parsed.options[name] = ""
            current = name
    for name in VALUED & parsed.options.keys():
        if not parsed.options[name]:
            parsed.missing = parsed.missing or parsed.written[name]
    return parsed


def _glued(word: str) -> tuple[Sub, str] | None:
    low = word.lower()
    for name in sorted(_NAMES, key=len, reverse=True):
        if low.startswith(name) and len(low) > len(name):
            return _NAMES[name], word[len(name) :]
    return None


async def _permitted(call: Call, access: Access) -> str | None:
    """``None`` when the sender may use the subcommand, else the refusal's key."""
    bot, event = call.bot, call.event
    if access == "public":
        return None
    level = "superuser" if access == "change" else config.auto_assign_read_permission
    if level == "everyone":
        return None
    if level == "admin":
        if await (SUPERUSER | GROUP_ADMIN | GROUP_OWNER)(bot, event):
            return None
        return "denied.admin"
    return None if await SUPERUSER(bot, event) else "denied.superuser"


async def respond(bot: Bot, event: Event, state: T_State, text: str) -> str:
    """The reply to one ``aa`` command; never raises."""
    t = Texts(config.auto_assign_language)
    prefix = state.get(PREFIX_KEY) or {}
    start = str(prefix.get(CMD_START_KEY) or "")
    cmd = str(prefix.get(RAW_CMD_KEY) or f"{start}{COMMAND}")
    written = (prefix.get(CMD_KEY) or (COMMAND,))[0]
    alias = f"{start}{ALIAS if written == COMMAND else COMMAND}"
    parsed = parse(text)
    if parsed.sub is None:
        return t("unknown_sub", word=parsed.args[0], cmd=cmd)
    sub = parsed.sub
    call = Call(bot, event, t, cmd, alias, sub, parsed.args, parsed.options)
    unknown = parsed.unknown or next(
        (parsed.written[n] for n in parsed.options if n not in sub.options), None
    )
    if unknown is not None:
        return t("unknown_flag", command=call.command, flag=unknown, usage=call.usage())
    if parsed.missing is not None:
        return t("option_value", flag=parsed.missing, usage=call.usage())
    if len(parsed.args) > sub.max_args:
        return t("too_many_args", usage=call.usage())
    try:
        refusal = await _permitted(call, sub.access_for(call))
        if refusal is not None:
            return t(refusal, command=call.command)
        if len(parsed.args) < sub.min_args:
            return t("missing_arg", usage=call.usage())
        return await sub.run(call)
    except Exception as e:  # noqa: BLE001 - a command must answer, not raise
        logger.opt(exception=e).error(f"auto-assign: {call.command} failed")
        return t("failed", error=f"{type(e).__name__}: {e}")


# ------------------------------------------------------------------------------ the matcher
def _is_ours(prefix: Mapping[str, Any]) -> bool:
    """The command is ``aa`` followed by a space, by nothing, or by a subcommand's name
    (``/分配状态``): not another plugin's ``/aardvark`` or ``/分配任务``."""
    if prefix.get(CMD_KEY) not in ((COMMAND,), (ALIAS,)):
        return False
    arg = prefix.get(CMD_ARG_KEY)
    text = arg.extract_plain_text() if arg is not None else ""
    if prefix.get(CMD_WHITESPACE_KEY) is None and text.strip():
        first = text.split()[0].lower()
        if first not in _NAMES and _glued(first) is None:
            return False
    return True


def own_command(bot: Bot, event: Event) -> bool:
    """Is the message one of this plugin's commands? (The gate asks, before NoneBot parses
    commands: in a group an operator holds, only these and mentions get through.)"""
    return _is_ours(TrieRule.get_value(bot, event, {}))


async def _ours(bot: Bot, event: Event, state: T_State) -> bool:
    """The command is ours (``_is_ours``). And with the gate off, the gate still picks the one
    bot that answers it in a group."""
    if not _is_ours(state.get(PREFIX_KEY) or {}):
        return False
    if isinstance(event, GroupMessageEvent) and not config.auto_assign_enabled:
        return (await decide(bot, event)).handle
    return True


aa = on_command(COMMAND, rule=_ours, aliases={ALIAS}, priority=5, block=True)


@aa.handle()
async def _handle(
    bot: Bot, event: Event, state: T_State, matcher: Matcher, arg: Message[Any] = CommandArg()
) -> None:
    await matcher.finish(await respond(bot, event, state, arg.extract_plain_text()))


def usage() -> str:
    """The plugin metadata's ``usage``: the help in both languages, Chinese first."""
    parts = []
    for language in LANGUAGES:
        t = Texts(language)
        text = help_text(t, f"/{COMMAND}", f"/{ALIAS}", "everyone")
        parts.append(f"{text}\n{t('help.config')}")
    return "\n\n".join(parts)
