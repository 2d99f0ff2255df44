"""The commands (``aa``, Chinese ``分配``): a command in a group is answered once, by the group's
bot; replies come in the configured language; ``rebalance`` is for superusers; a service that
cannot be reached is said so in the reply.

Replies are checked through nonebug's own ``should_call_send`` (``helpers.ask``): a reply by
any other bot than the expected one fails the test."""

from __future__ import annotations

import asyncio

import nonebot
from nonebug import App

from .helpers import (
    BOTS,
    Reply,
    ask,
    connect,
    group_message,
    private_message,
    requests_seen,
    settle,
    wait_until,
)
from .service import Service

SUPERUSER = 4242  # conftest: superusers={"4242"}


def assignment_load(assignment: dict[str, str], bot: str) -> int:
    return sum(1 for b in assignment.values() if b == bot)


async def test_two_bots_in_one_group_give_one_reply(app: App, service: Service) -> None:
    from nonebot_plugin_auto_assign import config

    async with app.test_api() as ctx:
        bots = connect(ctx, ["1001", "1002"])
        assignment = await settle(service, ["1001", "1002"])
        group = "3"  # both bots are members
        owner = assignment[group]
        known = [b for b in await service.get("/v1/bots") if b["platform"] == "onebot"]
        # Every bot the service knows, in its order; bots of earlier tests may be offline.
        loads_zh = "、".join(f"{b['bot']} {b['load']}" if b["online"] else f"{b['bot']} 离线" for b in known)
        loads_en = ", ".join(f"{b['bot']} {b['load']}" if b["online"] else f"{b['bot']} offline" for b in known)
        assert f"1001 {assignment_load(assignment, '1001')}" in loads_en
        status = await service.get("/v1/status")
        counts = status["platforms"]["onebot"]

        for text in ("/aa status", "/分配 状态", "/分配状态", "/aa 状态"):
            reply = await ask(ctx, bots, group, text, owner)
            lines = reply.splitlines()
            assert lines[0] == "auto-assign 服务：可连接；分配流：已连接", reply
            assert lines[1] == (
                f"onebot：已分配 {counts['assigned']} 个群，未分配 {counts['unassigned']}，"
                f"排除 {counts['excluded']}"
            )
            assert lines[2] == f"负载（群数）：{loads_zh}"
            assert lines[3] == "本进程（nonebug）：1001、1002"
            assert lines[4].startswith("上次重新分配：#"), reply

        config.auto_assign_language = "en"
        reply = await ask(ctx, bots, group, "/aa status", owner)
        lines = reply.splitlines()
        assert lines[0] == "auto-assign service: reachable; assignment stream: connected"
        assert lines[2] == f"Load (groups): {loads_en}"
        assert lines[3] == "This process (nonebug): 1001, 1002"
        assert lines[4].startswith("Last rebalance: #"), reply

        # The help, with the command as it was written.
        config.auto_assign_language = "zh"
        reply = await ask(ctx, bots, group, "/aa", owner)
        assert reply.splitlines()[0] == "auto-assign：每个群只由一个 bot 应答。命令（/aa，也可写 /分配）："
        assert "/aa explain [群号]（或 解释）：" in reply
        assert "/aa rebalance [--dry-run]（或 重新分配）：立即重新分配，仅超级用户；" in reply
        assert "/aa pin [bot] [-g 群号] [--until 2h] [--note 备注]（或 固定）：" in reply
        assert reply.splitlines()[-1] == "查询命令：所有人；修改命令：仅超级用户。"
        reply = await ask(ctx, bots, group, "/分配 帮助", owner)
        assert "（/分配，也可写 /aa）" in reply and "/分配 status（或 状态）：" in reply
        config.auto_assign_language = "en"
        reply = await ask(ctx, bots, group, "/aa help", owner)
        assert "/aa explain [group] (or 解释): who answers in the group and why" in reply
        assert reply.splitlines()[-1] == (
            "Reading commands: everyone; changing commands: superusers only."
        )
        # Words the plugin does not know.
        reply = await ask(ctx, bots, group, "/aa frobnicate", owner)
        assert reply == 'There is no subcommand "frobnicate". Send /aa help for the usage.'
        config.auto_assign_language = "zh"
        reply = await ask(ctx, bots, group, "/分配 乱码", owner)
        assert reply == "没有子命令“乱码”。发送 /分配 help 查看用法。"
        reply = await ask(ctx, bots, group, "/aa status now", owner)
        assert reply == "参数太多。用法：/aa status"


async def test_other_commands_are_left_alone(app: App, service: Service) -> None:
    """``/aardvark`` or ``/分配任务`` (another plugin's command, or none) get no reply from this
    plugin: nonebug would fail on a send it does not expect."""
    from .plugins.record import HANDLED

    async with app.test_api() as ctx:
        bots = connect(ctx)
        assignment = await settle(service, BOTS)
        for n, text in enumerate(("/aardvark", "/分配任务", "/aa.status")):
            events = {b: group_message(b, "6", text, seq=800_000 + n) for b in BOTS}
            before = len(HANDLED)
            await asyncio.gather(*(bots[b].handle_event(events[b]) for b in BOTS))
            # The message itself went through the gate to the group's bot only.
            assert [h[0] for h in HANDLED[before:]] == [assignment["6"]], text
        assert ctx.wait_list.empty()


async def test_explain(app: App, service: Service) -> None:
    from nonebot_plugin_auto_assign import config
    from nonebot_plugin_auto_assign.i18n import EN, ZH

    async with app.test_api() as ctx:
        bots = connect(ctx)
        assignment = await settle(service, BOTS)
        group = "6"  # all three bots are members
        owner = assignment[group]
        why = await service.get(f"/v1/explain/onebot/{group}")
        assert why["assignee"] == owner
        members = {m["bot"]: m["load"] for m in why["members"]}
        assert set(members) == set(BOTS)

        for text in ("/aa explain", "/分配 解释", "/aa explain 6", "/分配解释6"):
            reply = await ask(ctx, bots, group, text, owner)
            assert reply.splitlines() == [
                f"群 6：由 {owner} 应答。",
                f"原因：{ZH['reason.' + why['reason']]}",
                "成员：" + "、".join(f"{b}（{members[b]} 个群）" for b in sorted(members)),
            ], (text, reply)

        # Another group, asked here: the excluded group, a group nobody reported, not a group.
        reply = await ask(ctx, bots, group, "/aa explain 12", owner)
        assert reply.splitlines()[:2] == [
            "群 12：没有指定的 bot，每条消息由先抢到的 bot 应答。",
            "原因：这个群在 excludeChannels 中，服务不为它分配或更换 bot",
        ]
        reply = await ask(ctx, bots, group, "/aa explain 99", owner)
        assert reply == (
            "群 99：没有指定的 bot，每条消息由先抢到的 bot 应答。\n原因：没有 bot 报告自己在这个群里"
        )
        assert await ask(ctx, bots, group, "/aa explain abc", owner) == "“abc”不是群号。"
        assert await ask(ctx, bots, group, "/aa explain 1 2", owner) == (
            "参数太多。用法：/aa explain [群号]"
        )

        config.auto_assign_language = "en"
        reply = await ask(ctx, bots, group, "/aa explain", owner)
        assert reply.splitlines() == [
            f"Group 6: {owner} answers.",
            f"Why: {EN['reason.' + why['reason']]}",
            "Members: " + ", ".join(f"{b} ({members[b]} groups)" for b in sorted(members)),
        ]
        # Each group's own bot answers there, about that group.
        for g in ("2", "10"):
            reply = await ask(ctx, bots, g, "/aa explain", assignment[g])
            assert reply.startswith(f"Group {g}: {assignment[g]} answers.\n"), reply

        # A private message is not gated (the bot it was sent to answers); it needs a group.
        for lang, expected in (("en", "Name the group: /aa explain [group]"), ("zh", "请写明群号：/aa explain [群号]")):
            config.auto_assign_language = lang  # type: ignore[assignment]
            event = private_message("1003", "/aa explain")
            reply_ = Reply()
            ctx.should_call_send(event, reply_, result={"message_id": 1}, bot=bots["1003"])
            await bots["1003"].handle_event(event)
            assert ctx.wait_list.empty()
            assert reply_.text == expected
        event = private_message("1003", "/aa explain 6")
        reply_ = Reply()
        ctx.should_call_send(event, reply_, result={"message_id": 2}, bot=bots["1003"])
        await bots["1003"].handle_event(event)
        assert ctx.wait_list.empty()
        assert reply_.text is not None and reply_.text.startswith(f"群 6：由 {owner} 应答。\n")


async def test_rebalance_is_for_superusers(app: App, service: Service) -> None:
    from nonebot_plugin_auto_assign import config

    async with app.test_api() as ctx:
        bots = connect(ctx)
        assignment = await settle(service, BOTS)
        group = "5"
        owner = assignment[group]
        with requests_seen() as seen:
            reply = await ask(ctx, bots, group, "/aa rebalance", owner)
            assert reply == "只有超级用户（SUPERUSERS）可以使用 /aa rebalance。"
            reply = await ask(ctx, bots, group, "/分配 重新分配", owner)
            assert reply == "只有超级用户（SUPERUSERS）可以使用 /分配 rebalance。"
            config.auto_assign_language = "en"
            reply = await ask(ctx, bots, group, "/aa rebalance", owner)
            assert reply == "Only superusers (SUPERUSERS) may use /aa rebalance."
            # A group admin is no superuser either.
            reply = await ask(ctx, bots, group, "/aa rebalance", owner, role="admin")
            assert reply == "Only superusers (SUPERUSERS) may use /aa rebalance."
            # A dry run is reading: a member may ask for it, and nothing is rebalanced.
            reply = await ask(ctx, bots, group, "/aa rebalance --dry-run", owner)
            assert reply.startswith("Dry run: "), reply
            assert ("POST", "/v1/rebalance?dryRun=true") in seen
            assert ("POST", "/v1/rebalance") not in seen
            # An option it does not have is refused.
            reply = await ask(ctx, bots, group, "/aa rebalance --now", owner, user=SUPERUSER)
            assert reply == "/aa rebalance has no option --now. Usage: /aa rebalance [--dry-run]"
            assert ("POST", "/v1/rebalance") not in seen

            config.auto_assign_language = "zh"
            reply = await ask(ctx, bots, group, "/aa rebalance", owner, user=SUPERUSER)
            assert reply == "已请求重新分配。稍后发送 /aa status 查看结果。"
            assert seen.count(("POST", "/v1/rebalance")) == 1

        async def requested() -> bool:
            run = (await service.get("/v1/status"))["last_run"]
            return run is not None and "requested" in run["causes"]

        await wait_until(requested, what="the requested rebalance ran")
        reply = await ask(ctx, bots, group, "/aa status", owner)
        assert "（手动请求）" in reply.splitlines()[-1], reply
        config.auto_assign_language = "en"
        reply = await ask(ctx, bots, group, "/aa rebalance", owner, user=SUPERUSER)
        assert reply == "Rebalance requested. Send /aa status in a moment to see the result."


async def test_who_may_read(app: App, service: Service) -> None:
    """AUTO_ASSIGN_READ_PERMISSION: everyone (default), admin, superuser."""
    from nonebot_plugin_auto_assign import config

    async with app.test_api() as ctx:
        bots = connect(ctx)
        assignment = await settle(service, BOTS)
        group = "7"
        owner = assignment[group]
        config.auto_assign_read_permission = "admin"
        denied = "只有群主、群管理员和超级用户可以使用 /aa status。"
        assert await ask(ctx, bots, group, "/aa status", owner) == denied
        for role in ("admin", "owner"):
            reply = await ask(ctx, bots, group, "/aa status", owner, role=role)
            assert reply.startswith("auto-assign 服务：可连接"), (role, reply)
        reply = await ask(ctx, bots, group, "/aa explain", owner, user=SUPERUSER)
        assert reply.startswith(f"群 7：由 {owner} 应答。"), reply
        # The help is for everyone, and says who may read.
        reply = await ask(ctx, bots, group, "/aa help", owner)
        assert reply.splitlines()[-1] == "查询命令：群主、群管理员和超级用户；修改命令：仅超级用户。"

        config.auto_assign_read_permission = "superuser"
        config.auto_assign_language = "en"
        reply = await ask(ctx, bots, group, "/aa explain", owner, role="owner")
        assert reply == "Only superusers (SUPERUSERS) may use /aa explain."
        reply = await ask(ctx, bots, group, "/aa status", owner, user=SUPERUSER)
        assert reply.startswith("auto-assign service: reachable"), reply


async def test_commands_are_gated_in_every_gate_mode(app: App, service: Service) -> None:
    """AUTO_ASSIGN_GATE=commands gates the plugin's commands (they are NoneBot commands); with
    the gate off (AUTO_ASSIGN_ENABLED=false) every bot handles every message, but the plugin's
    own commands still get one reply."""
    from nonebot_plugin_auto_assign import config

    from .plugins.record import HANDLED

    async with app.test_api() as ctx:
        bots = connect(ctx)
        assignment = await settle(service, BOTS)
        group = "6"
        owner = assignment[group]
        config.auto_assign_gate = "commands"
        reply = await ask(ctx, bots, group, "/aa explain", owner)
        assert reply.startswith(f"群 6：由 {owner} 应答。")

        config.auto_assign_gate = "all"
        config.auto_assign_enabled = False
        before = len(HANDLED)
        reply = await ask(ctx, bots, group, "/分配 状态", owner)
        assert reply.startswith("auto-assign 服务：可连接")
        # The gate let the message through to every bot; the command's rule kept one.
        assert sorted(h[0] for h in HANDLED[before:]) == list(BOTS)


async def test_service_unreachable(app: App, service: Service) -> None:
    """The service stopped: the replies say so, and what this process still knows."""
    from nonebot_plugin_auto_assign import config, runtime

    async with app.test_api() as ctx:
        bots = connect(ctx)
        assignment = await settle(service, BOTS)
        group = "4"
        owner = assignment[group]
        service.stop()
        try:
            await wait_until(lambda: not runtime.state.connected, what="stream down")
            reply = await ask(ctx, bots, group, "/aa status", owner)
            lines = reply.splitlines()
            assert lines[0].startswith("auto-assign 服务：无法连接（"), reply
            assert lines[1:] == [
                f"分配流：未连接；本进程按最近收到的分配（{len(assignment)} 个群）决定",
                "本进程（nonebug）：1001、1002、1003",
            ]
            reply = await ask(ctx, bots, group, "/aa explain", owner)
            first, second = reply.splitlines()
            assert first.startswith("无法连接 auto-assign 服务（") and first.endswith("）。")
            assert second == f"按本进程最近收到的分配，群 4 由 {owner} 应答。"
            reply = await ask(ctx, bots, group, "/aa explain 99", owner)
            assert reply.splitlines()[1] == "本进程最近收到的分配里没有群 99。"
            reply = await ask(ctx, bots, group, "/aa rebalance", owner, user=SUPERUSER)
            assert reply.startswith("无法连接 auto-assign 服务（"), reply
            # The operator's commands too (test_operator.py has them with the service up).
            for text in ("/aa pins", "/aa drains", "/aa 预演"):
                reply = await ask(ctx, bots, group, text, owner)
                assert reply.startswith("无法连接 auto-assign 服务（"), (text, reply)
            for text in ("/aa pin", "/aa hold", "/aa unpin", "/aa drain 1001", "/aa undrain 1001"):
                reply = await ask(ctx, bots, group, text, owner, user=SUPERUSER)
                assert reply.startswith("无法连接 auto-assign 服务（"), (text, reply)

            config.auto_assign_language = "en"
            reply = await ask(ctx, bots, group, "/aa status", owner)
            assert reply.startswith("auto-assign service: unreachable ("), reply
            reply = await ask(ctx, bots, group, "/aa rebalance", owner, user=SUPERUSER)
            assert reply.startswith("The auto-assign service cannot be reached ("), reply
        finally:
            service.start()
        await wait_until(lambda: runtime.state.connected, what="stream back")


async def test_wrong_token_is_named(app: App, service: Service) -> None:
    """A service that refuses the token (401): the reply names AUTO_ASSIGN_TOKEN."""
    from nonebot_plugin_auto_assign import config, runtime
    from nonebot_plugin_auto_assign.client import ServiceClient

    async with app.test_api() as ctx:
        bots = connect(ctx)
        assignment = await settle(service, BOTS)
        group = "9"
        owner = assignment[group]
        wrong = ServiceClient(service.url, "not-the-token", 2.0)
        client, runtime.client = runtime.client, wrong
        try:
            reply = await ask(ctx, bots, group, "/aa rebalance", owner, user=SUPERUSER)
            config.auto_assign_language = "en"
            status = await ask(ctx, bots, group, "/aa status", owner)
        finally:
            runtime.client = client
            await wrong.aclose()
        assert reply.startswith("auto-assign 服务拒绝了令牌（HTTP 401"), reply
        assert reply.endswith("），请检查 AUTO_ASSIGN_TOKEN。"), reply
        assert status.startswith("auto-assign service: refused the request (HTTP 401"), status
        assert nonebot.get_bots().keys() == set(BOTS)
