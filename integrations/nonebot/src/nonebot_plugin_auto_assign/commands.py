"""The plugin's commands: ``aa`` (Chinese ``分配``) and its subcommands, one NoneBot
``on_command``.

======================  ==========  ==========================================================
subcommand              alias       who
======================  ==========  ==========================================================
``aa`` / ``aa help``    ``帮助``     everyone
``aa explain [group]``  ``解释``     reading: ``AUTO_ASSIGN_READ_PERMISSION`` (everyone)
``aa status``           ``状态``     reading
``aa rebalance``        ``重新分配``  changing: ``SUPERUSER``
======================  ==========  ==========================================================

More subcommands slot into ``SUBCOMMANDS`` once the service has their routes (issue 60):
``pin <group> <bot>`` / ``unpin <group>`` (``固定`` / ``取消固定``) and ``drain <bot>`` /
``undrain <bot>`` (``排空`` / ``取消排空``) as ``access="change"`` with ``max_args``, and
``rebalance --dry-run`` as a flag of ``rebalance`` whose ``access`` is a function of the call
(``"read"`` with the flag). Until a subcommand declares a flag, the flag is refused: ``aa
rebalance --dry-run`` today answers that there is no such option and rebalances nothing.

A command in a group goes through the gate like any group message (the event preprocessor):
only the group's bot answers it. With the gate off (``AUTO_ASSIGN_ENABLED=false``) these
commands still ask the gate, in their rule, so that one bot answers them.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
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
from nonebot.typing import T_State

from . import config, decide, driver, runtime
from .client import Rejected, ServiceClient, Unreachable
from .i18n import LANGUAGES, Texts

COMMAND = "aa"
ALIAS = "分配"
MAX_LISTED = 30
"""Bots listed in one reply at most (the rest are counted)."""

Access = Literal["public", "read", "change"]


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
    flags: set[str]

    @property
    def command(self) -> str:
        return f"{self.cmd} {self.sub.name}"

    def usage(self) -> str:
        return self.texts(f"usage.{self.sub.name}", cmd=self.cmd)


@dataclass(frozen=True)
class Sub:
    name: str
    aliases: tuple[str, ...]
    run: Callable[[Call], Awaitable[str]]
    access: Access | Callable[[Call], Access] = "read"
    """``public``: anyone; ``read``: ``AUTO_ASSIGN_READ_PERMISSION``; ``change``: superusers."""
    max_args: int = 0
    flags: frozenset[str] = frozenset()
    """The ``--options`` it takes; any other is refused."""

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
        return t("rejected.token" if e.status == 401 else "rejected", error=e)
    return t("unreachable", error=e)


def _listed(t: Texts, items: list[str]) -> str:
    if len(items) > MAX_LISTED:
        return t.join([*items[:MAX_LISTED], t("list.more", n=len(items))])
    return t.join(items)


# ------------------------------------------------------------------------------ subcommands
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
    elif isinstance(call.event, GroupMessageEvent):
        group = str(call.event.group_id)
    else:
        return t("explain.need_group", usage=call.usage())
    if not (group.isascii() and group.isdigit()):
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
    if assignee is None:
        head = t("explain.nobody", group=group)
    elif online.get(str(assignee), True):
        head = t("explain.assignee", group=group, bot=assignee)
    else:
        head = t("explain.assignee_offline", group=group, bot=assignee)
    if assignee is not None and assignment.get("committed") is False:
        head += t("explain.not_committed")
    reason = str(explanation.get("reason", ""))
    key = f"reason.{reason}" if f"reason.{reason}" in t.catalogue else "reason.other"
    lines = [
        head,
        t("explain.reason", reason=t(key, platform=platform, text=explanation.get("text", reason))),
    ]
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
    return "\n".join(lines)


async def _rebalance(call: Call) -> str:
    t = call.texts
    try:
        await _client().rebalance()
    except Rejected as e:
        if e.status == 409:
            return t("rebalance.follower", error=e)
        return _service_error(t, e)
    except Unreachable as e:
        return _service_error(t, e)
    return t("rebalance.requested", cmd=call.cmd)


SUBCOMMANDS: tuple[Sub, ...] = (
    Sub("explain", ("解释",), _explain, max_args=1),
    Sub("status", ("状态",), _status),
    Sub("rebalance", ("重新分配",), _rebalance, access="change"),
    Sub("help", ("帮助",), _help, access="public"),
)
_NAMES: dict[str, Sub] = {
    name.lower(): sub for sub in SUBCOMMANDS for name in (sub.name, *sub.aliases)
}


# ------------------------------------------------------------------------------ parsing
def parse(text: str) -> tuple[Sub | None, list[str], set[str]]:
    """The subcommand, its arguments and its ``--flags``; no words: ``help``. The subcommand
    may be glued to what follows (``/分配状态``, ``/分配解释123``). ``None``: no such
    subcommand (the first word is returned as the only argument)."""
    words = text.split()
    if not words:
        return _NAMES["help"], [], set()
    first, rest = words[0], words[1:]
    sub = _NAMES.get(first.lower())
    if sub is None:
        glued = _glued(first)
        if glued is None:
            return None, [first], set()
        sub, tail = glued
        rest = [tail, *rest]
    args = [w for w in rest if not w.startswith("--")]
    flags = {w.lower() for w in rest if w.startswith("--")}
    return sub, args, flags


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
    sub, args, flags = parse(text)
    if sub is None:
        return t("unknown_sub", word=args[0], cmd=cmd)
    call = Call(bot, event, t, cmd, alias, sub, args, flags)
    unknown = sorted(flags - sub.flags)
    if unknown:
        return t("unknown_flag", command=call.command, flag=unknown[0], usage=call.usage())
    if len(args) > sub.max_args:
        return t("too_many_args", usage=call.usage())
    try:
        refusal = await _permitted(call, sub.access_for(call))
        if refusal is not None:
            return t(refusal, command=call.command)
        return await sub.run(call)
    except Exception as e:  # noqa: BLE001 - a command must answer, not raise
        logger.opt(exception=e).error(f"auto-assign: {call.command} failed")
        return t("failed", error=f"{type(e).__name__}: {e}")


# ------------------------------------------------------------------------------ the matcher
async def _ours(bot: Bot, event: Event, state: T_State) -> bool:
    """The command is ``aa`` followed by a space, by nothing, or by a subcommand's name
    (``/分配状态``): not another plugin's ``/aardvark`` or ``/分配任务``. And with the gate off,
    the gate still picks the one bot that answers it in a group."""
    prefix = state.get(PREFIX_KEY) or {}
    arg = prefix.get(CMD_ARG_KEY)
    text = arg.extract_plain_text() if arg is not None else ""
    if prefix.get(CMD_WHITESPACE_KEY) is None and text.strip():
        first = text.split()[0].lower()
        if first not in _NAMES and _glued(first) is None:
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
