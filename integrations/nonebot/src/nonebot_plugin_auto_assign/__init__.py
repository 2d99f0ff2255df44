"""nonebot-plugin-auto-assign: one bot of the fleet answers each group.

* **Gate**: an event preprocessor that lets a group message through for one bot only and
  raises ``IgnoredException`` for the others, deciding from the assignment the service streams
  (``GET /v1/assignments/stream?reporter=<name>``); unassigned or excluded groups are claimed
  through ``POST /v1/ingress``.
* **Liveness**: the stream names this process's reporter, so the service knows the process is
  alive while it is open: a killed process's bots go offline within
  ``sources.http.streamGrace`` (0.5 s). A stream that drops is reopened at once.
* **Fleet source**: the bots connected to this NoneBot, with their group lists and their own
  join and leave notices, reported to the service (``/v1/fleet/reporters/{name}``).
* **Message counts**: how many messages each group received, each counted once however many
  bots of this process received it, reported with the fleet (the service's channel weights).
* **Commands**: ``aa`` (``分配``) ``explain``, ``status``, ``rebalance [--dry-run]``, and the
  operator's ``pin``, ``hold``, ``unpin``, ``drain``, ``undrain``, ``pins``, ``drains``
  (``commands.py``), replying in ``AUTO_ASSIGN_LANGUAGE`` (``i18n.py``).
* **Holds**: a group an operator holds with no assignee is answered by nobody (but a mentioned
  bot, and the plugin's own commands: one bot, through a per-message ``POST /v1/gate/owned``).
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import ssl
import time
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import aclosing

import anyio
from nonebot import get_driver, get_plugin_config, logger
from nonebot.adapters import Bot, Event
from nonebot.adapters.onebot.v11 import Bot as V11Bot
from nonebot.adapters.onebot.v11 import (
    GroupDecreaseNoticeEvent,
    GroupIncreaseNoticeEvent,
    GroupMessageEvent,
)
from nonebot.exception import IgnoredException
from nonebot.message import event_preprocessor
from nonebot.plugin import PluginMetadata

from .client import Rejected, ServiceClient, TlsRefused, Unreachable, tls_context
from .config import Config
from .fleet import Reporter
from .gate import (
    ASSIGNEE_OFFLINE,
    HELD,
    Claims,
    Stats,
    Verdict,
    counted_by_service,
    held,
    held_by_service,
    is_command,
    local_verdict,
)
from .state import Assignment

__all__ = ["Config", "Verdict", "config", "runtime"]

driver = get_driver()
config = get_plugin_config(Config)

_NAME = re.compile(r"[^A-Za-z0-9_.:-]")


def reporter_name() -> str:
    """``AUTO_ASSIGN_REPORTER``, else ``nonebot-<hostname>-<hash of the working directory>``:
    stable for one bot project, different for two (even on one host), as the Koishi plugin's."""
    name = config.auto_assign_reporter
    if not name:
        host = re.sub(r"[^A-Za-z0-9_.-]+", "-", socket.gethostname())[:60] or "host"
        digest = hashlib.sha256(os.getcwd().encode()).hexdigest()[:8]
        return f"nonebot-{host}-{digest}"
    safe = _NAME.sub("-", name)[:128]
    if safe != name:
        logger.warning(f"auto-assign: reporter name {name!r} used as {safe!r}")
    return safe


class Runtime:
    """The plugin's live state (tests read it)."""

    def __init__(self) -> None:
        self.client: ServiceClient | None = None
        self.state = Assignment(config.auto_assign_platform)
        self.stats = Stats()
        self.reporter = Reporter(
            reporter_name(),
            config.auto_assign_platform,
            heartbeat=lambda: config.auto_assign_heartbeat_interval,
            client=lambda: self.client,
            message_interval=lambda: config.auto_assign_message_report_interval,
        )
        self.messages = self.reporter.messages
        self.claims = Claims(
            platform=config.auto_assign_platform,
            plugin=config.auto_assign_claim_plugin,
            when_unreachable=lambda: config.auto_assign_when_unreachable,
            retry_after=lambda: config.auto_assign_retry_after,
            stats=self.stats,
        )
        self.scope: anyio.CancelScope | None = None
        self.fleet_wake = anyio.Event()
        self.stream_opens = 0
        self.stream_reporter: str | None = None
        """The reporter name the stream is followed under (``None``: anonymously)."""
        self.reconnects: Reconnects | None = None
        self.hooks_running = 0
        """Bot connect/disconnect hooks in progress."""


runtime = Runtime()


# ------------------------------------------------------------------------------ lifecycle
def _verify() -> ssl.SSLContext | bool:
    """The TLS settings for an ``https://`` AUTO_ASSIGN_URL: AUTO_ASSIGN_CA_FILE's CA, else
    the system's roots. A CA file that cannot be read trusts nothing (every request fails, and
    says why): the system's roots are not what was asked for."""
    ca_file = config.auto_assign_ca_file
    if not ca_file:
        return True
    try:
        return tls_context(ca_file)
    except (OSError, ssl.SSLError) as e:
        logger.error(
            f"auto-assign: AUTO_ASSIGN_CA_FILE {ca_file!r} cannot be used ({e}); no TLS "
            "certificate of the service will be trusted"
        )
        return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies, and trusts no CA


@driver.on_startup
async def _start() -> None:
    runtime.client = ServiceClient(
        config.auto_assign_url,
        config.auto_assign_token,
        config.auto_assign_timeout,
        verify=_verify(),
    )
    runtime.scope = anyio.CancelScope()
    driver.task_group.start_soon(_background, runtime.scope)


@driver.on_shutdown
async def _stop() -> None:
    # Shutdown functions run before the adapters disconnect their bots: the disconnect hooks
    # then find the client closed and only update local state.
    if runtime.scope is not None:
        runtime.scope.cancel()
    client, runtime.client = runtime.client, None
    if client is None:
        return
    if config.auto_assign_report_fleet:
        with anyio.move_on_after(config.auto_assign_timeout):
            await runtime.reporter.stop(client)
    await client.aclose()


async def _background(scope: anyio.CancelScope) -> None:
    with scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_supervised, _follow)
            tg.start_soon(_supervised, _refresh_fleet)
            if config.auto_assign_report_fleet:
                tg.start_soon(_supervised, runtime.reporter.run)
                tg.start_soon(_supervised, _resync)
                for bot in list(driver.bots.values()):  # connected before the plugin started
                    if isinstance(bot, V11Bot):
                        tg.start_soon(_report_groups, bot)


async def _supervised(task: Callable[[], Awaitable[None]]) -> None:
    """Runs a background task until it returns, restarting it after an unexpected error: an
    exception escaping into NoneBot's task group would stop NoneBot."""
    while True:
        try:
            await task()
            return
        except Exception as e:  # noqa: BLE001
            logger.opt(exception=e).error(f"auto-assign: {task.__name__} failed; restarting")
        await anyio.sleep(1.0)


# ------------------------------------------------------------------------------ the stream
async def _follow() -> None:
    """Follows the assignment stream for good; the last table stays in force while it is
    down."""
    try:
        await _follow_stream()
    finally:
        runtime.state.connected = False


class Reconnects:
    """When to reopen the assignment stream. A stream that drops is reopened at once: the
    service keeps this process's bots online for ``sources.http.streamGrace`` (0.5 s) while it
    has no stream, so a transient drop costs nothing. At most ``burst`` immediate reopenings
    within ``window`` seconds, though: a service or proxy that cuts every stream right away
    is retried with the backoff (0.5 s, doubling up to ``AUTO_ASSIGN_RECONNECT_MAX``), not in
    a loop of requests."""

    def __init__(self, burst: int = 3, window: float = 5.0) -> None:
        self.window = window
        self._immediate: deque[float] = deque(maxlen=burst)
        self.failures = 0
        """Failed attempts in a row, immediate ones not counted."""
        self._outage_immediate = False
        self.dropped_at: float | None = None
        self.last_delay: float | None = None
        """Seconds from the last drop of an open stream to the request that reopened it."""

    def opened(self) -> None:
        """The stream is open (its snapshot arrived)."""
        self.failures, self._outage_immediate = 0, False

    def dropped(self, now: float) -> float:
        """The stream ended or could not be opened: seconds to wait before the next attempt."""
        if self.dropped_at is None:
            self.dropped_at = now
        full = len(self._immediate) == self._immediate.maxlen
        if not self._outage_immediate and not (full and now - self._immediate[0] < self.window):
            self._outage_immediate = True
            self._immediate.append(now)
            return 0.0
        self.failures += 1
        backoff: float = 0.5 * 2 ** min(self.failures - 1, 8)
        return min(float(config.auto_assign_reconnect_max), backoff)

    def reopening(self, now: float) -> None:
        """A request to reopen the stream goes out."""
        if self.dropped_at is not None:
            self.last_delay, self.dropped_at = now - self.dropped_at, None


async def _follow_stream() -> None:
    state = runtime.state
    reconnects = runtime.reconnects = Reconnects()
    down_logged = False
    # Named, the stream tells the service this process is alive (only when it reports a fleet:
    # the name is its reporter's).
    runtime.stream_reporter = runtime.reporter.name if config.auto_assign_report_fleet else None
    while True:
        client = runtime.client
        if client is None or client.closed:
            return
        runtime.stream_opens += 1
        reconnects.reopening(time.monotonic())
        try:
            async with aclosing(client.stream(runtime.stream_reporter)) as events:
                async for name, data in events:
                    if name == "snapshot":
                        state.snapshot(int(data["version"]), data["assignments"])
                        if down_logged:
                            logger.info("auto-assign: assignment stream reconnected")
                        down_logged = False
                        reconnects.opened()
                        runtime.fleet_wake.set()
                        runtime.reporter.poke()  # a restarted service must hear from us
                    elif name == "changes":
                        version = int(data["version"])
                        if not state.apply(version, str(data["platform"]), data["assignments"]):
                            logger.info(
                                f"auto-assign: stream version {version} after {state.version}:"
                                " resyncing"
                            )
                            break
                        runtime.fleet_wake.set()
                    elif name == "presence":
                        # A bot went on- or offline; no version (not an assignment change).
                        platform, bot = str(data["platform"]), str(data["bot"])
                        state.presence(platform, bot, bool(data["online"]))
        except Rejected as e:
            if e.status == 400 and runtime.stream_reporter and "reporter" in e.error:
                # A service whose sources.http is off refuses the name: follow anonymously
                # (its bots then go offline after offlineGrace, not streamGrace).
                logger.warning(
                    f"auto-assign: the service refuses the stream's reporter name ({e.error}); "
                    "following it without (a killed process's bots go offline only after "
                    "sources.http.offlineGrace)"
                )
                runtime.stream_reporter = None
                state.connected = False
                continue
            down_logged = _stream_down(e, down_logged)
        except TlsRefused as e:
            if not down_logged:
                logger.error(f"auto-assign: assignment stream: {e}")
            down_logged = True
        except (Unreachable, ValueError, KeyError, TypeError) as e:
            down_logged = _stream_down(e, down_logged)
        state.connected = False
        await anyio.sleep(reconnects.dropped(time.monotonic()))


def _stream_down(e: Exception, logged: bool) -> bool:
    """Logs the stream's outage once; returns that it is logged."""
    if not logged:
        why = str(e)
        if isinstance(e, Rejected) and e.forbidden:
            why += " (the plugin needs a token of the report role)"
        logger.warning(
            f"auto-assign: assignment stream unavailable ({why}); deciding from the last "
            f"known assignment ({len(runtime.state.table)} group(s))"
        )
    return True


async def _refresh_fleet() -> None:
    """Reads the service's bot list: after a (re)connection and every assignment change
    (coalesced), and every ``fleet_refresh_interval`` seconds."""
    while True:
        with anyio.move_on_after(config.auto_assign_fleet_refresh_interval):
            await runtime.fleet_wake.wait()
        runtime.fleet_wake = anyio.Event()
        client = runtime.client
        if client is None or client.closed:
            return
        state = runtime.state
        reporter = runtime.reporter
        told, queued = reporter.all_sent(), reporter.queued
        since = state.presences
        await refresh_held(client)
        try:
            state.set_fleet(await client.bots(), since)
        except (Unreachable, Rejected, ValueError, KeyError, TypeError):
            pass  # the last read stays; the stream's handler logs outages
        else:
            # Only a list read after everything we reported counts: a bot that left while
            # the request was under way is still online in it.
            if told and reporter.queued == queued and state.fleet is not None:
                # Bots of ours that left and that the service, told so, still has online:
                # they run elsewhere now.
                for bot in [b for b in state.ours if state.fleet.get(b)]:
                    if bot not in driver.bots and bot not in reporter.groups:
                        state.ours.discard(bot)
        await anyio.sleep(0.2)


async def refresh_held(client: ServiceClient) -> None:
    """Reads the operator's holds (``GET /v1/pins``) for the gate; a service without the
    route is not asked again until the stream reconnects."""
    state = runtime.state
    if state.pins_unsupported:
        return
    try:
        pins = await client.pins()
    except Rejected as e:
        if e.status == 404:
            state.pins_unsupported = True
            state.held = set()
        return
    except (Unreachable, ValueError, KeyError, TypeError, AttributeError):
        return  # the last read stays
    state.set_pins(pins)


# ------------------------------------------------------------------------------ fleet source
async def _group_list(bot: V11Bot) -> set[str]:
    groups = await bot.get_group_list()
    return {str(g["group_id"]) for g in groups}


async def _report_groups(bot: V11Bot) -> None:
    """Reports ``bot`` online with its group list, retrying ``get_group_list`` while the bot
    stays connected."""
    delay = 1.0
    runtime.reporter.fetching(bot.self_id)
    while driver.bots.get(bot.self_id) is bot:
        try:
            groups = await _group_list(bot)
        except Exception as e:  # noqa: BLE001 - any adapter error: retry
            logger.warning(
                f"auto-assign: get_group_list of {bot.self_id} failed ({e!r}); retrying in "
                f"{delay:.0f} s"
            )
            await anyio.sleep(delay)
            delay = min(delay * 2, 60.0)
            continue
        if driver.bots.get(bot.self_id) is bot:
            runtime.reporter.online(bot.self_id, groups)
        return


async def _resync() -> None:
    """Every ``resync_interval`` s: every bot's group list again (catches missed notices)."""
    while config.auto_assign_resync_interval > 0:
        await anyio.sleep(config.auto_assign_resync_interval)
        await resync_once()


async def resync_once() -> None:
    """Fetches every reported bot's group list and reports the ones that changed."""
    reporter = runtime.reporter
    for bot in list(driver.bots.values()):
        if not isinstance(bot, V11Bot) or bot.self_id not in reporter.groups:
            continue
        reporter.fetching(bot.self_id)
        try:
            groups = await _group_list(bot)
        except Exception as e:  # noqa: BLE001
            logger.warning(f"auto-assign: get_group_list of {bot.self_id} failed ({e!r})")
            reporter.fetch_failed(bot.self_id)
            continue
        if driver.bots.get(bot.self_id) is bot and bot.self_id in reporter.groups:
            reporter.refreshed(bot.self_id, groups)
        else:
            reporter.fetch_failed(bot.self_id)


@driver.on_bot_connect
async def _bot_connected(bot: V11Bot) -> None:
    runtime.state.ours.add(bot.self_id)
    if not config.auto_assign_report_fleet:
        return
    runtime.hooks_running += 1
    try:
        await _report_groups(bot)
    finally:
        runtime.hooks_running -= 1


@driver.on_bot_disconnect
async def _bot_disconnected(bot: V11Bot) -> None:
    if bot.self_id in driver.bots:
        return  # already connected again (a new connection replaced this one)
    runtime.reporter.offline(bot.self_id)


# ------------------------------------------------------------------------------ the gate
def _gone(bot: str) -> bool:
    """A bot of this process that is not connected (whatever the service says yet)."""
    return bot in runtime.state.ours and bot not in driver.bots


async def decide(bot: Bot, event: GroupMessageEvent) -> Verdict:
    """Should ``bot`` handle this group message?"""
    lane: str | None = None
    if config.auto_assign_gate == "commands":
        if not is_command(bot, event):
            return Verdict(True, "fanout lane (not a command)")
        lane = "command"
    self_id = bot.self_id
    if config.auto_assign_decide_locally:
        local = local_verdict(self_id, event, driver.bots, runtime.state)
    else:
        local = "asking the service for every message"
    if not isinstance(local, str):
        runtime.stats.local += 1
        return local
    if held(event, driver.bots, runtime.state):
        if not commands.own_command(bot, event):
            runtime.stats.local += 1
            return HELD
        return await _own_command_in_held_group(self_id, event)
    if lane is None:
        lane = "command" if is_command(bot, event) else "chat"
    before = None
    if local == ASSIGNEE_OFFLINE and config.auto_assign_report_fleet:
        # The assignee may be a bot of ours that just went away: the service must hear of it
        # before it is asked, else it would name that bot again. (Its disconnect hook may not
        # have run yet: reporting it twice is harmless.)
        assignee = runtime.state.table.get(str(event.group_id), "")
        if _gone(assignee):
            runtime.reporter.offline(assignee)

        async def before() -> bool:
            return await runtime.reporter.wait_sent(config.auto_assign_timeout)

    try:
        verdict = await runtime.claims.decide(
            runtime.client, self_id, event, lane, before, gone=_gone
        )
    except Exception as e:  # noqa: BLE001 - an escaping exception would drop the event
        logger.exception(f"auto-assign: claim failed: {e!r}")
        return runtime.claims.unreachable("error")
    decision = runtime.claims.answer(event)
    if decision is not None and held_by_service(decision):
        # Held, and the plugin did not know it yet (a hold made elsewhere, read at the next
        # refresh): it is known from now on.
        runtime.state.held.add(str(event.group_id))
        if commands.own_command(bot, event):
            return await _own_command_in_held_group(self_id, event)
    return verdict


async def _own_command_in_held_group(self_id: str, event: GroupMessageEvent) -> Verdict:
    """One of the plugin's commands in a group an operator holds: the service's ingress
    answers nobody there, so one bot is picked by the owned gate, per message."""
    try:
        return await runtime.claims.command(runtime.client, self_id, event)
    except Exception as e:  # noqa: BLE001
        logger.exception(f"auto-assign: claim failed: {e!r}")
        return runtime.claims.unreachable("error")


# ------------------------------------------------------------------------------ message counts
def _count(event: GroupMessageEvent, verdict: Verdict | None) -> None:
    """Counts a group message for its group's weight, once per process and, with the same rule
    in every process, once in the fleet: unless the service counted it already (it counts the
    ``POST /v1/ingress`` decision that goes to the assignee or wins the claim), or the group is
    assigned to an online bot of another process (that process counts it). Messages of bots of
    the fleet are not counted."""
    messages = runtime.messages
    if (
        config.auto_assign_message_report_interval <= 0
        or messages.refused
        or not config.auto_assign_report_fleet
    ):
        return
    if not messages.first_sight((event.group_id, event.user_id, event.raw_message, event.time)):
        return  # another bot of this process received it: decided already
    state = runtime.state
    if state.is_fleet_bot(str(event.user_id), driver.bots):
        return
    group = str(event.group_id)
    assignee = state.table.get(group)
    if verdict is not None and verdict.reason.startswith("service"):
        decision = runtime.claims.answer(event)  # None: the service was not reached
        if decision is not None:
            if counted_by_service(decision):
                messages.left += 1
                return
            named = decision.get("assignee")
            if isinstance(named, str):
                assignee = named
    if assignee is not None and assignee not in driver.bots and assignee not in state.ours:
        fleet = state.fleet
        if fleet is None or fleet.get(assignee, True):
            messages.elsewhere += 1
            return  # an online bot of another process: that process counts it
    messages.add(group)


# ------------------------------------------------------------------------------ the preprocessor
@event_preprocessor
async def auto_assign_preprocessor(bot: Bot, event: Event) -> None:
    if isinstance(event, GroupMessageEvent):
        if not config.auto_assign_enabled:
            _count(event, None)
            return
        verdict = await decide(bot, event)
        _count(event, verdict)
        if config.auto_assign_log_decisions:
            logger.debug(
                f"auto-assign: {bot.self_id} group {event.group_id} message {event.message_id}: "
                f"{'handles' if verdict.handle else 'skips'} ({verdict.reason})"
            )
        if not verdict.handle:
            raise IgnoredException(f"auto-assign: {verdict.reason}")
    elif isinstance(event, (GroupIncreaseNoticeEvent, GroupDecreaseNoticeEvent)):
        # Own joins and leaves, seen here so no matcher can hide them.
        if event.is_tome() and config.auto_assign_report_fleet:
            group = str(event.group_id)
            if isinstance(event, GroupIncreaseNoticeEvent):
                runtime.reporter.joined(bot.self_id, group)
            else:
                runtime.reporter.left(bot.self_id, group)


# ------------------------------------------------------------------------------ commands, metadata
from . import commands as commands  # noqa: E402 - needs the runtime and the gate above

__plugin_meta__ = PluginMetadata(
    name="auto-assign 多 bot 群分配",
    description=(
        "同一批群里有多个 bot 时，每个群只由 auto-assign 服务指定的一个 bot 应答 / "
        "Exactly one bot of the fleet answers each group, the one the auto-assign service assigns"
    ),
    usage=commands.usage(),
    type="application",
    homepage="https://github.com/auto-assign/auto-assign/tree/main/integrations/nonebot",
    config=Config,
    supported_adapters={"~onebot.v11"},
)
