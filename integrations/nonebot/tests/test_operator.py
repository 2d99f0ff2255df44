"""The operator's commands against the real service: ``pin``, ``hold``, ``unpin``, ``drain``,
``undrain``, ``pins``, ``drains`` and ``rebalance --dry-run``, in Chinese and English; the
service's refusals in words; changes refused to non-superusers; a follower's refusal sent on to
the leader (two real instances under leadership, on one SQLite file and one Redis).

Every reply is checked through nonebug's ``should_call_send`` (``helpers.ask``, ``ask_any``):
a second reply, from any bot, fails the test. Every change is checked where it lands: the
service's ``GET /v1/pins`` / ``/v1/drains``, its assignment, the plugin's streamed table and
the gate (which bot handles a message then)."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from nonebug import App

from .helpers import (
    BOTS,
    ask,
    ask_any,
    ask_private,
    connect,
    deliver,
    requests_seen,
    settle,
    wait_until,
)
from .service import NO_DELAYS, PLATFORM, TOKEN, Service, free_port

SUPERUSER = 4242  # conftest: superusers={"4242"}


def report(capsys: pytest.CaptureFixture[str], text: str) -> None:
    """Prints a measurement past pytest's capture."""
    with capsys.disabled():
        print(f"\n{text}")


def when(iso: str) -> str:
    from nonebot_plugin_auto_assign import config
    from nonebot_plugin_auto_assign.i18n import Texts

    return Texts(config.auto_assign_language).when(iso)


def changes(seen: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The operator's changes among the requests seen."""
    return [
        r
        for r in seen
        if r[0] in ("PUT", "DELETE") and r[1].startswith(("/v1/pins", "/v1/drains"))
        or r == ("POST", "/v1/rebalance")
    ]


async def test_pin_and_unpin_from_the_group(
    app: App, service: Service, capsys: pytest.CaptureFixture[str]
) -> None:
    from nonebot_plugin_auto_assign import config, runtime

    async with app.test_api() as ctx:
        bots = connect(ctx)
        assignment = await settle(service, BOTS)
        group = "6"  # all three bots are members
        owner = assignment[group]
        other = next(b for b in BOTS if b != owner)

        # Changes are for superusers: a member, a group admin and the group's owner are refused,
        # and nothing reaches the service.
        with requests_seen() as seen:
            for role in ("member", "admin", "owner"):
                reply = await ask(ctx, bots, group, f"/aa pin {other}", owner, role=role)
                assert reply == "只有超级用户（SUPERUSERS）可以使用 /aa pin。", (role, reply)
            reply = await ask(ctx, bots, group, "/分配 固定", owner)
            assert reply == "只有超级用户（SUPERUSERS）可以使用 /分配 pin。"
            config.auto_assign_language = "en"
            reply = await ask(ctx, bots, group, "/aa unpin", owner)
            assert reply == "Only superusers (SUPERUSERS) may use /aa unpin."
            config.auto_assign_language = "zh"
        assert not changes(seen)
        assert await service.pins() == {}

        # A superuser pins the group to another bot, with an end and a note.
        sent = time.monotonic()
        reply = await ask(
            ctx, bots, group, f"/aa pin {other} --until 2h --note VIP 活动", owner, user=SUPERUSER
        )
        replied = time.monotonic()
        pin = (await service.pins())[group]
        assert (pin["bot"], pin["note"]) == (other, "VIP 活动")
        assert reply == f"已把群 6 固定到 {other}，至 {when(pin['until'])}，备注：VIP 活动。\n解除：/aa unpin"

        async def visible() -> bool:
            p = (await service.pins()).get(group)
            return (
                p is not None
                and (p["bot"], p["state"], p["assignee"]) == (other, "in-force", other)
                and (await service.assignment()).get(group) == other
                and runtime.state.table.get(group) == other
            )

        await wait_until(visible, timeout=5.0, what="the pin in GET /v1/pins and the assignment")
        seen_at = time.monotonic()
        report(
            capsys,
            f"pin by command: replied after {(replied - sent) * 1000:.0f} ms; in GET /v1/pins, "
            f"the service's assignment and the plugin's table {(seen_at - replied) * 1000:.0f} ms "
            "after the reply"
        )

        # The pinned bot answers now, and explain says why.
        reply = await ask(ctx, bots, group, "/aa explain", other)
        lines = reply.splitlines()
        assert lines[:2] == [
            f"群 6：由 {other} 应答。",
            f"原因：运营者固定，至 {when(pin['until'])}，备注：VIP 活动",
        ], reply
        assert lines[2].startswith("成员："), reply
        reply = await ask(ctx, bots, group, "/分配 固定列表", other)
        assert reply == (
            f"固定和保持空（1 个）：\n群 6 → {other}，至 {when(pin['until'])}，备注：VIP 活动\n"
            "解除：/分配 unpin -g 群号"
        )

        # A rebalance leaves the pin in force.
        before = (await service.get("/v1/status"))["last_run"]["number"]
        reply = await ask(ctx, bots, group, "/aa rebalance", other, user=SUPERUSER)
        assert reply == "已请求重新分配。稍后发送 /aa status 查看结果。"

        async def rebalanced() -> bool:
            run = (await service.get("/v1/status"))["last_run"]
            return bool(run["number"] > before and "requested" in run["causes"])

        await wait_until(rebalanced, what="the requested rebalance")
        assert (await service.assignment())[group] == other

        # Released, in English.
        config.auto_assign_language = "en"
        reply = await ask(ctx, bots, group, "/aa unpin", other, user=SUPERUSER)
        assert reply == f"Group 6 is no longer pinned to {other}; the plan assigns it again."
        assert await service.pins() == {}
        assignment = await settle(service, BOTS)
        reply = await ask(ctx, bots, group, "/aa unpin", assignment[group], user=SUPERUSER)
        assert reply == "Group 6 is neither pinned nor held."
        reply = await ask(ctx, bots, group, "/aa pins", assignment[group])
        assert reply == "No group is pinned or held."

        # @-mentioning a bot makes it the one that receives the command: "pin" pins it.
        third = next(b for b in BOTS if b != assignment[group])
        reply = await ask(
            ctx, bots, group, "/aa pin", third, user=SUPERUSER, at=[third]
        )
        assert reply == f"Group 6 is pinned to {third}.\nTo release: /aa unpin"
        await wait_until(
            lambda: runtime.state.table.get(group) == third, what="the pin in the plugin's table"
        )
        assert (await service.pins())[group]["bot"] == third


async def test_the_services_refusals_in_words(app: App, service: Service) -> None:
    from nonebot_plugin_auto_assign import config

    async with app.test_api() as ctx:
        bots = connect(ctx)
        assignment = await settle(service, BOTS)
        group = "2"  # 1001 and 1002 are its members, not 1003
        owner = assignment[group]

        async def su(text: str) -> str:
            return await ask(ctx, bots, group, text, owner, user=SUPERUSER)

        reply = await su("/aa pin 1003")
        head = "1003 不在群 2 里，只能固定到群里的 bot："
        assert reply.startswith(head) and reply.endswith("。"), reply
        assert sorted(reply[len(head) : -1].split("、")) == ["1001", "1002"]
        assert await su("/aa pin 7777") == "服务不知道 bot 7777。"
        assert await su("/分配 固定 1001 -g 99") == "服务不知道群 99：没有 bot 报告自己在这个群里。"
        until_help = (
            "不是有效的结束时间：写一段时长（如 2h、90m、1d 12h）或 RFC 3339 时间"
            "（如 2026-12-24T18:00:00+08:00），并且要在将来。"
        )
        assert await su("/aa pin --until yesterday") == f"“yesterday”{until_help}"
        assert await su("/aa hold --until -2h") == f"“-2h”{until_help}"
        assert await su("/aa pin --note " + "长" * 501) == "备注不符合要求（longer than 500 characters）。"
        assert await su("/aa unpin") == "群 2 没有固定，也没有保持空。"
        assert await su("/aa undrain 1003") == "1003 没有被排空。"
        # Refused before the service is asked.
        usage = "/aa hold [-g 群号] [--until 2h] [--note 备注]"
        assert await su("/aa hold --until") == f"选项 --until 后面要写值。用法：{usage}"
        assert await su("/aa pin abc") == "“abc”不是 bot 的号码。"
        assert await su("/aa unpin -g abc") == "“abc”不是群号。"
        assert await su("/aa pin --bogus") == (
            "/aa pin 没有选项 --bogus。用法：/aa pin [bot] [-g 群号] [--until 2h] [--note 备注]"
        )
        assert await su("/aa pin 1001 1002") == (
            "参数太多。用法：/aa pin [bot] [-g 群号] [--until 2h] [--note 备注]"
        )
        assert await su("/aa drain") == "缺少参数。用法：/aa drain <bot> [--until 1d] [--note 备注]"

        config.auto_assign_language = "en"
        reply = await su("/aa pin 1003")
        head = "1003 is not in group 2; a group can only be pinned to one of its bots: "
        assert reply.startswith(head) and sorted(reply[len(head) : -1].split(", ")) == ["1001", "1002"]
        assert await su("/aa drain 7777") == "The service does not know bot 7777."
        assert await su("/aa pin --until=tomorrow") == (
            '"tomorrow" is not a valid end: write a duration (2h, 90m, 1d 12h) or an RFC 3339 time '
            "(2026-12-24T18:00:00+08:00), in the future."
        )
        assert await su("/aa unpin -g 99") == "Group 99 is neither pinned nor held."
        assert await su("/aa 排空 abc") == "\"abc\" is not a bot's number."
        # A private chat has no group of its own.
        reply = await ask_private(ctx, bots["1001"], "/aa pin", user=SUPERUSER)
        assert reply == "Name the group: /aa pin [bot] [-g group] [--until 2h] [--note text]"
        # Nothing of this changed anything.
        assert await service.pins() == {} and await service.drains() == {}


async def test_hold_silences_the_group(
    app: App, service: Service, capsys: pytest.CaptureFixture[str]
) -> None:
    from nonebot_plugin_auto_assign import config, runtime

    async with app.test_api() as ctx:
        bots = connect(ctx)
        assignment = await settle(service, BOTS)
        group = "7"  # all three bots are members
        owner = assignment[group]
        assert await deliver(bots, group, "hello") == [owner]

        reply = await ask(ctx, bots, group, "/aa hold", owner)
        assert reply == "只有超级用户（SUPERUSERS）可以使用 /aa hold。"
        sent = time.monotonic()
        reply = await ask(ctx, bots, group, "/分配 保持空 --备注 安静一下", owner, user=SUPERUSER)
        assert reply == (
            "群 7 已保持空：没有 bot 应答（@bot 的消息和 /分配 命令除外），备注：安静一下。\n"
            "解除：/分配 unpin"
        )

        async def held() -> bool:
            p = (await service.pins()).get(group)
            return (
                p is not None
                and (p["bot"], p["state"]) == (None, "held")
                and group not in await service.assignment()
                and group not in runtime.state.table
            )

        await wait_until(held, timeout=5.0, what="the hold in GET /v1/pins and the assignment")
        report(capsys, f"hold by command: in GET /v1/pins and the assignment after {(time.monotonic() - sent) * 1000:.0f} ms")

        # Nobody answers: no matcher runs for a message (nor for another plugin's command)...
        assert await deliver(bots, group, "hello") == []
        assert await deliver(bots, group, "/ping") == []
        # ...but a mentioned bot does, and the plugin's own commands get one reply.
        assert await deliver(bots, group, "hi", at=["1002"]) == ["1002"]
        _, reply = await ask_any(ctx, bots, group, "/aa explain")
        assert reply.splitlines()[:2] == [
            "群 7：保持空，没有 bot 应答（@bot 的消息和 /aa 命令除外）。",
            "原因：运营者让它保持空，备注：安静一下",
        ], reply
        _, reply = await ask_any(ctx, bots, group, "/分配 固定列表")
        assert reply == "固定和保持空（1 个）：\n群 7：保持空，备注：安静一下\n解除：/分配 unpin -g 群号"
        elsewhere = assignment["6"]
        reply = await ask(ctx, bots, "6", "/aa status", elsewhere)
        assert reply.splitlines()[-1] == (
            "运营者：固定 0 个群，保持空 1 个，排空 0 个 bot（/aa pins、/aa drains）"
        )
        _, reply = await ask_any(ctx, bots, group, "/aa unpin")
        assert reply == "只有超级用户（SUPERUSERS）可以使用 /aa unpin。"
        _, reply = await ask_any(ctx, bots, group, "/aa unpin", user=SUPERUSER)
        assert reply == "群 7 不再保持空，恢复按计划分配。"
        assignment = await settle(service, BOTS)
        assert await deliver(bots, group, "hello") == [assignment[group]]

        # From a private chat, in English, naming the group.
        config.auto_assign_language = "en"
        reply = await ask_private(ctx, bots["1001"], "/aa hold -g 7 --until 90m", user=SUPERUSER)
        pin = (await service.pins())[group]
        assert reply == (
            "Group 7 is held: no bot answers there (but to an @mention and to /aa commands), "
            f"until {when(pin['until'])}.\nTo release: /aa unpin -g 7"
        )
        await wait_until(lambda: group not in runtime.state.table, what="the hold streamed")
        assert await deliver(bots, group, "hello") == []
        reply = await ask_private(ctx, bots["1001"], "/aa unpin 7", user=SUPERUSER)
        assert reply == "Group 7 is no longer held; the plan assigns it again."
        assignment = await settle(service, BOTS)
        assert await deliver(bots, group, "hello") == [assignment[group]]


async def test_a_hold_the_plugin_has_not_read_yet(app: App, service: Service) -> None:
    """A hold made elsewhere (the command line, the dashboard) that the plugin has not read yet:
    the service's ingress answers "held" (nobody), and the plugin knows the hold from then on;
    the plugin's own commands still get one reply, through the command gate."""
    from nonebot_plugin_auto_assign import runtime

    async with app.test_api() as ctx:
        bots = connect(ctx)
        await settle(service, BOTS)
        group = "7"  # all three bots are members
        await service.put(f"/v1/pins/{PLATFORM}/{group}", {"bot": None})
        await wait_until(lambda: group not in runtime.state.table, what="the hold streamed")
        await wait_until(lambda: group in runtime.state.held, what="the hold read")
        runtime.state.held.discard(group)  # as if not read yet

        requests = runtime.stats.requests
        assert await deliver(bots, group, "hello") == []
        assert runtime.stats.requests == requests + 1  # one claim for the three bots
        assert group in runtime.state.held  # learnt from the answer
        assert await deliver(bots, group, "hello again") == []
        assert runtime.stats.requests == requests + 1  # decided locally now

        runtime.state.held.discard(group)
        _, reply = await ask_any(ctx, bots, group, "/aa explain")
        assert reply.splitlines()[0] == "群 7：保持空，没有 bot 应答（@bot 的消息和 /aa 命令除外）。"
        # Known: the command goes to the gate at once (one request for the three bots).
        requests = runtime.stats.requests
        _, reply = await ask_any(ctx, bots, group, "/aa pins")
        assert reply.splitlines()[1] == "群 7：保持空", reply
        assert runtime.stats.requests == requests + 1


async def test_drain_and_undrain(
    app: App, service: Service, capsys: pytest.CaptureFixture[str]
) -> None:
    from nonebot_plugin_auto_assign import config, runtime

    async with app.test_api() as ctx:
        bots = connect(ctx)
        assignment = await settle(service, BOTS)
        assert "1003" in assignment.values()
        group = "6"
        owner = assignment[group]

        sent = time.monotonic()
        reply = await ask(
            ctx, bots, group, "/aa drain 1003 --until 1d --note 风控 提醒", owner, user=SUPERUSER
        )
        drain = (await service.drains())["1003"]
        assert reply == (
            "已排空 1003：它只保留别的 bot 接不了的群，不再分到新群，"
            f"至 {when(drain['until'])}，备注：风控 提醒。\n解除：/aa undrain 1003"
        )

        async def drained() -> bool:
            # 1001 is in every group of 1003: 1003 keeps none.
            a = await service.assignment()
            return "1003" not in a.values() and "1003" not in runtime.state.table.values()

        await wait_until(drained, timeout=5.0, what="1003's groups moved away")
        report(capsys, f"drain by command: 1003's groups moved after {(time.monotonic() - sent) * 1000:.0f} ms")
        assignment = await settle(service, BOTS)
        owner = assignment[group]
        reply = await ask(ctx, bots, group, "/aa drains", owner)
        assert reply == (
            f"排空（1 个）：\n1003：仍应答 0 个群，至 {when(drain['until'])}，备注：风控 提醒\n"
            "恢复：/aa undrain <bot>"
        )
        # A pin to the drained bot waits: the plan serves the group meanwhile.
        reply = await ask(ctx, bots, group, "/aa pin 1003 -g 9", owner, user=SUPERUSER)
        assert reply == "已把群 9 固定到 1003。\n解除：/aa unpin -g 9"
        pin = (await service.pins())["9"]
        assert (pin["state"], pin["assignee"]) == ("waiting", "1001")  # 9: 1001 and 1003
        reply = await ask(ctx, bots, group, "/aa explain 9", owner)
        lines = reply.splitlines()
        assert lines[0] == "群 9：由 1001 应答。", reply
        assert "运营者把它固定到 1003，但 1003 现在不能应答（离线、排空或已退群），暂时按计划分配。" in lines
        assert "已排空：1003" in lines, reply
        reply = await ask(ctx, bots, group, "/aa pins", owner)
        assert reply.splitlines()[1] == "群 9 → 1003（1003 现在不能应答，暂由 1001 应答）", reply
        reply = await ask(ctx, bots, group, "/aa status", owner)
        assert reply.splitlines()[-1] == (
            "运营者：固定 1 个群，保持空 0 个，排空 1 个 bot（/aa pins、/aa drains）"
        )
        assert await ask(ctx, bots, group, "/分配 恢复 1003", owner) == (
            "只有超级用户（SUPERUSERS）可以使用 /分配 undrain。"
        )

        config.auto_assign_language = "en"
        reply = await ask(ctx, bots, group, "/aa undrain 1003", owner, user=SUPERUSER)
        assert reply == "1003 is no longer drained; it takes groups again."
        assert await service.drains() == {}
        # Undrained, 1003 takes groups again, and group 9 returns to it (its pin is in force).
        await wait_until(
            lambda: runtime.state.table.get("9") == "1003", what="group 9 back on 1003"
        )
        assignment = await settle(service, BOTS)
        reply = await ask(ctx, bots, group, "/aa drains", assignment[group])
        assert reply == "No bot is drained."
        reply = await ask(ctx, bots, group, "/aa pins", assignment[group])
        assert reply == "Pinned and held (1):\ngroup 9 → 1003\nTo release: /aa unpin -g <group>"
        reply = await ask(ctx, bots, "9", "/aa explain", "1003")
        assert reply.splitlines()[:2] == ["Group 9: 1003 answers.", "Why: pinned by an operator"]
        reply = await ask(ctx, bots, group, "/aa drain 1002 --note risk", assignment[group], user=SUPERUSER)
        assert reply == (
            "1002 is drained: it keeps only the groups no other bot can take, and gets no new "
            "ones, note: risk.\nTo release: /aa undrain 1002"
        )
        assert (await service.drains())["1002"]["note"] == "risk"


async def test_a_change_the_database_cannot_store_yet(app: App, service: Service) -> None:
    """The service's database does not take a change within 5 s (this test holds SQLite's
    write lock on it): the change is in force at once, the reply says it is not stored yet
    (the service's 202, ``stored: false``; longer than ``AUTO_ASSIGN_TIMEOUT``, and not a
    failure), and it is stored once the database answers."""
    from nonebot_plugin_auto_assign import runtime
    from nonebot_plugin_auto_assign.i18n import EN, ZH

    async def audit() -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = (await service.get("/v1/audit?limit=5"))["audit"]
        return entries

    async with app.test_api() as ctx:
        bots = connect(ctx)
        assignment = await settle(service, BOTS)
        group = "6"
        owner = assignment[group]
        other = next(b for b in BOTS if b != owner)
        since = max((e["at_ms"] for e in await audit()), default=0)
        lock = sqlite3.connect(service.dir / "state.db", isolation_level=None, timeout=10)
        try:
            lock.execute("BEGIN EXCLUSIVE")
            reply = await ask(ctx, bots, group, f"/aa pin {other}", owner, user=SUPERUSER)
            assert reply == f"已把群 6 固定到 {other}。\n解除：/aa unpin\n{ZH['not_stored']}"
            await wait_until(
                lambda: runtime.state.table.get(group) == other, what="the pin in force"
            )
        finally:
            lock.execute("COMMIT")
            lock.close()

        async def stored() -> bool:
            return any(
                (e["action"], e["target"], e["bot"]) == ("pin", group, other)
                and e["at_ms"] >= since
                for e in await audit()
            )

        await wait_until(stored, what="the pin in the audit log, read from the database")
        reply = await ask(ctx, bots, group, "/aa unpin", other, user=SUPERUSER)
        assert ZH["not_stored"] not in reply and EN["not_stored"] not in reply, reply
        assert await service.pins() == {}


async def test_dry_run(app: App, service: Service) -> None:
    """A bot comes online while the service waits 10 minutes before rebalancing for it: the
    dry run shows the moves to it and the loads before and after, changes nothing, and the
    rebalance then requested lands on the loads it predicted."""
    from nonebot_plugin_auto_assign import config

    async with app.test_api() as ctx:
        bots = connect(ctx, ["1001", "1002"])
        await settle(service, ["1001", "1002"])
        # Neither the bot's coming online nor its groups trigger a rebalance for 10 minutes.
        waiting = NO_DELAYS.replace("botOnline: 0", "botOnline: 600")
        await service.reload(waiting.replace("channelJoined: 0", "channelJoined: 600"))
        try:
            bots |= connect(ctx, ["1003"])
            assignment = await settle(service, BOTS)
            assert "1003" not in assignment.values()  # its rebalance waits
            group = "6"
            owner = assignment[group]
            with requests_seen() as seen:
                reply = await ask(ctx, bots, group, "/aa rebalance --dry-run", owner)
            assert ("POST", "/v1/rebalance?dryRun=true") in seen and not changes(seen)
            plan = next(
                p
                for p in (await service.post("/v1/rebalance?dryRun=true", {}))["platforms"]
                if p["platform"] == PLATFORM
            )
            moves = plan["moves"]
            assert moves and all(m["to"] == "1003" for m in moves), plan
            lines = reply.splitlines()
            assert lines[0] == (
                f"预演：重新分配会迁移 {len(moves)} 个群（强制 {plan['forced']}，主动 "
                f"{plan['voluntary']}）："
            ), reply
            shown = min(len(moves), 10)
            assert lines[1 : 1 + shown] == [
                f"群 {m['channel']}：{m['from']} → 1003（主动，负载均衡）" for m in moves[:shown]
            ], reply
            loads = [f"{b['bot']}：{b['before']} → {b['after']}" for b in plan["loads"]]
            at = lines.index("负载（前 → 后）：")
            assert lines[at + 1 : at + 1 + len(loads)] == loads, reply
            assert "1003：0 → " in reply
            assert lines[-2:] == [
                f"Σ 负载²：{plan['before']['sumSq']} → {plan['after']['sumSq']}",
                "这只是预演，什么都没有改变。要执行：/aa rebalance（仅超级用户）",
            ], reply
            assert plan["after"]["sumSq"] < plan["before"]["sumSq"]
            # Nothing moved.
            assert await service.assignment() == assignment

            config.auto_assign_language = "en"
            reply = await ask(ctx, bots, group, "/aa 预演", owner)
            lines = reply.splitlines()
            assert lines[0].startswith(f"Dry run: a rebalance would move {len(moves)} groups ("), reply
            assert lines[1] == f"group {moves[0]['channel']}: {moves[0]['from']} → 1003 (voluntary, balance)"
            assert lines[-2] == f"Σ load²: {plan['before']['sumSq']} → {plan['after']['sumSq']}"
            assert lines[-1] == (
                "Only a dry run: nothing changed. To apply it: /aa rebalance (superusers only)"
            )

            # Applied: the loads become what the dry run said.
            after = {b["bot"]: b["after"] for b in plan["loads"]}
            reply = await ask(ctx, bots, group, "/aa rebalance", owner, user=SUPERUSER)
            assert reply.startswith("Rebalance requested."), reply

            async def predicted() -> bool:
                a = await service.assignment()
                return {b: sum(1 for x in a.values() if x == b) for b in after} == after

            await wait_until(predicted, what="the loads the dry run predicted")
            assignment = await settle(service, BOTS)
            reply = await ask(ctx, bots, group, "/aa dry-run", assignment[group])
            lines = reply.splitlines()
            assert lines[0] == "Dry run: a rebalance now would move no group.", reply
            assert lines[-1] == "Only a dry run: nothing changed."
        finally:
            await service.reload(NO_DELAYS)


# ------------------------------------------------------------------------------ leadership
class Redis:
    def __init__(self) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    async def ready(self) -> None:
        import socket

        def up() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", self.port)) == 0

        await wait_until(up, what="redis-server")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture
async def leader_and_follower() -> AsyncIterator[tuple[Service, Service]]:
    """Two instances under leadership (``a`` leads, ``b`` follows) on one SQLite file and a
    private Redis; the fleet reported to both: 1001 and 1002 in group 3."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (leadership needs Redis)")
    redis = Redis()
    a = Service(exclude=[], name="a")
    b = Service(exclude=[], dir=a.dir, name="b")
    try:
        await redis.ready()
        for s, name in ((a, "a"), (b, "b")):
            s.configure(
                NO_DELAYS
                + f'redis: {{url: "redis://127.0.0.1:{redis.port}"}}\n'
                + f"leadership: {{instance: {name}, leaseTtl: 2}}\n"
            )
        a.start()
        await wait_until(
            lambda: _role(a, "leader"), timeout=15.0, what="instance a leads"
        )
        b.start()
        await wait_until(lambda: _role(b, "follower"), timeout=15.0, what="instance b follows")
        fleet = {
            "bots": [
                {"platform": PLATFORM, "id": bot, "online": True, "channels": ["3"]}
                for bot in ("1001", "1002")
            ]
        }
        for s in (a, b):
            await s.put("/v1/fleet/reporters/pair", fleet)
        await wait_until(lambda: _assigned(a, "3"), what="group 3 assigned by the leader")
        yield a, b
    finally:
        b.stop()
        a.stop()
        redis.stop()
        shutil.rmtree(a.dir, ignore_errors=True)


async def _role(s: Service, role: str) -> bool:
    try:
        health: dict[str, Any] = await s.get("/healthz")
    except Exception:  # noqa: BLE001 - not up yet
        return False
    return bool((health.get("leadership") or {}).get("role") == role)


async def _assigned(s: Service, group: str) -> bool:
    return group in await s.assignment()


async def test_a_follower_sends_changes_to_the_leader(
    app: App,
    service: Service,
    leader_and_follower: tuple[Service, Service],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """AUTO_ASSIGN_URL points at a follower: its 409 names the leader, and the plugin sends the
    change once more, there."""
    from nonebot_plugin_auto_assign import config, runtime
    from nonebot_plugin_auto_assign.client import ServiceClient

    leader, follower = leader_and_follower
    via_zh = f"（AUTO_ASSIGN_URL 指向的是从节点，已由主节点 {leader.url} 完成）"
    async with app.test_api() as ctx:
        bots = connect(ctx)
        await settle(service, BOTS)
        client, runtime.client = runtime.client, ServiceClient(follower.url, TOKEN, 2.0)
        try:
            bot = bots["1001"]

            async def su(text: str) -> str:
                return await ask_private(ctx, bot, text, user=SUPERUSER)

            sent = time.monotonic()
            assert await su("/aa pin 1002 -g 3") == (
                f"已把群 3 固定到 1002。\n解除：/aa unpin -g 3\n{via_zh}"
            )
            await wait_until(
                lambda: _pinned(leader, "3", "1002"), what="the pin at the leader"
            )
            report(
                capsys,
                f"pin through a follower: at the leader after {(time.monotonic() - sent) * 1000:.0f} ms"
            )
            assert await su("/aa unpin -g 3") == f"已取消群 3 到 1002 的固定，恢复按计划分配。\n{via_zh}"
            assert await leader.pins() == {}
            assert await su("/aa drain 1001") == (
                "已排空 1001：它只保留别的 bot 接不了的群，不再分到新群。\n"
                f"解除：/aa undrain 1001\n{via_zh}"
            )
            assert set(await leader.drains()) == {"1001"}
            assert await su("/aa undrain 1001") == f"已恢复 1001，它又可以分到群了。\n{via_zh}"
            assert await su("/aa rebalance") == (
                f"已请求重新分配。稍后发送 /aa status 查看结果。\n{via_zh}"
            )
            # The leader's refusal stands.
            assert await su("/aa pin 7777 -g 3") == "服务不知道 bot 7777。"
            config.auto_assign_language = "en"
            assert await su("/aa hold -g 3") == (
                "Group 3 is held: no bot answers there (but to an @mention and to /aa commands)."
                "\nTo release: /aa unpin -g 3\n(AUTO_ASSIGN_URL points at a follower; the leader "
                f"{leader.url} made the change)"
            )
            assert (await leader.pins())["3"]["bot"] is None
        finally:
            wrong, runtime.client = runtime.client, client
            assert wrong is not None
            await wrong.aclose()


async def _pinned(s: Service, group: str, bot: str) -> bool:
    pin = (await s.pins()).get(group)
    return pin is not None and pin["bot"] == bot
