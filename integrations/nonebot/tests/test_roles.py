"""Tokens with roles (``api.tokens``): the plugin's own work needs ``report`` (reporting, claims,
the stream, the reading commands); the changing commands need ``admin``, and a ``report``
token's 403 is answered in words. A ``read`` token cannot report, and the log says what the
token lacks. The service's refusals are recognised by their ``code`` (by their English words
from an older service)."""

from __future__ import annotations

import time

import pytest
from nonebug import App

from .helpers import BOTS, EXCLUDED, ask, connect, deliver, settle, wait_until
from .service import READ_TOKEN, REPORT_TOKEN, Service

SUPERUSER = 4242


async def test_a_report_token_does_the_plugins_work_but_no_changes(
    app: App, service: Service
) -> None:
    from nonebot_plugin_auto_assign import config, runtime
    from nonebot_plugin_auto_assign.client import ServiceClient

    async with app.test_api() as ctx:
        bots = connect(ctx)
        assignment = await settle(service, BOTS)
        group = "6"
        owner = assignment[group]
        client, runtime.client = runtime.client, ServiceClient(service.url, REPORT_TOKEN, 2.0)
        try:
            # Reporting and claims work with it.
            reports = runtime.reporter.reports
            runtime.reporter.poke()
            await wait_until(lambda: runtime.reporter.reports > reports, what="a report")
            requests = runtime.stats.requests
            assert len(await deliver(bots, EXCLUDED, "claimed")) == 1
            assert runtime.stats.requests > requests
            # So do the reading commands...
            reply = await ask(ctx, bots, group, "/aa pins", owner)
            assert reply == "没有固定或保持空的群。"
            # ...but not the changes: the reply says which role they need.
            forbidden_zh = (
                "auto-assign 服务不允许这个令牌做这件事（the token of plugins has the role report; "
                "this needs admin）：修改命令要 admin 角色的令牌，请在服务的 api.tokens 中给 "
                "AUTO_ASSIGN_TOKEN 换成 admin 角色（插件平时的工作只需要 report）。"
            )
            for text in ("/aa pin 1001", "/aa hold", "/aa unpin", "/aa drain 1001", "/aa rebalance"):
                reply = await ask(ctx, bots, group, text, owner, user=SUPERUSER)
                assert reply == forbidden_zh, (text, reply)
            config.auto_assign_language = "en"
            reply = await ask(ctx, bots, group, "/aa undrain 1003", owner, user=SUPERUSER)
            assert reply == (
                "The auto-assign service does not let this token do that (the token of plugins "
                "has the role report; this needs admin): the changing commands need a token of "
                "the admin role; give AUTO_ASSIGN_TOKEN the admin role in the service's "
                "api.tokens (the plugin's own work needs only report)."
            )
            assert await service.pins() == {} and await service.drains() == {}
        finally:
            other, runtime.client = runtime.client, client
            assert other is not None
            await other.aclose()


async def test_a_read_token_cannot_report(app: App, service: Service) -> None:
    from nonebot import logger

    from nonebot_plugin_auto_assign import runtime
    from nonebot_plugin_auto_assign.client import ServiceClient

    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(m.record["message"]), level="WARNING")
    async with app.test_api() as ctx:
        bots = connect(ctx)
        await settle(service, BOTS)
        client, runtime.client = runtime.client, ServiceClient(service.url, READ_TOKEN, 2.0)
        try:
            runtime.reporter.poke()
            await wait_until(
                lambda: any("AUTO_ASSIGN_TOKEN's role may not report the fleet" in x for x in lines),
                what="the reporter's refusal in the log",
            )
            line = next(x for x in lines if "may not report the fleet" in x)
            assert line == (
                "auto-assign: reporter nonebug: HTTP 403: the token of viewer has the role read; "
                "this needs report: AUTO_ASSIGN_TOKEN's role may not report the fleet; the plugin "
                "needs a token of the report role (or admin) in the service's api.tokens; retrying"
            ), line
            # A claim is refused too: AUTO_ASSIGN_WHEN_UNREACHABLE (answer) decides, and the log
            # says why.
            assert await deliver(bots, EXCLUDED, "anyone?") == ["1001", "1003"]
            assert any(
                "a claim failed, the service refused it (HTTP 403" in x
                and "(AUTO_ASSIGN_TOKEN's role may not claim: it needs report)" in x
                for x in lines
            ), lines
        finally:
            logger.remove(sink)
            other, runtime.client = runtime.client, client
            assert other is not None
            await other.aclose()
        # With its token back the reporter sends its full state again, and claims work.
        full = runtime.reporter.full_states
        await wait_until(lambda: runtime.reporter.full_states > full, what="the full state again")
        await wait_until(lambda: time.monotonic() > runtime.claims._down_until, what="claims again")
        assert len(await deliver(bots, EXCLUDED, "claimed again")) == 1


@pytest.mark.parametrize("language", ["zh", "en"])
def test_refusals_by_code(language: str) -> None:
    from nonebot_plugin_auto_assign.client import Rejected
    from nonebot_plugin_auto_assign.commands import _refused, refusal_code
    from nonebot_plugin_auto_assign.i18n import Texts

    t = Texts(language)  # type: ignore[arg-type]

    def refusal(status: int, error: str, code: str | None = None, **more: object) -> Rejected:
        body: dict[str, object] = {"error": error, **more}
        if code is not None:
            body["code"] = code
        return Rejected(f"HTTP {status}: {error}", status, body)

    # The code decides, whatever the words (a service may reword them).
    reworded = refusal(404, "bot inconnu", "unknown_bot")
    assert _refused(t, reworded, bot="7777") == t("refused.unknown_bot", bot="7777")
    members = refusal(409, "not here", "not_a_member", members=["1001", "1002"])
    assert _refused(t, members, bot="1003", group="2") == t(
        "refused.not_member", bot="1003", group="2", members=t.join(["1001", "1002"])
    )
    assert _refused(t, refusal(404, "x", "nothing_to_end"), group="5") == t(
        "refused.no_pin", group="5"
    )
    assert _refused(t, refusal(404, "x", "nothing_to_end"), bot="1003") == t(
        "refused.no_drain", bot="1003"
    )
    assert _refused(t, refusal(400, "x", "invalid_until"), until="soon") == t(
        "refused.until", until="soon"
    )
    assert _refused(t, refusal(404, "x", "unknown_channel"), group="99") == t(
        "refused.unknown_group", group="99"
    )
    forbidden = refusal(403, "the token of plugins has the role report; this needs admin", "forbidden")
    assert _refused(t, forbidden) == t(
        "rejected.forbidden", error="the token of plugins has the role report; this needs admin"
    )
    # An older service: no code, its English words.
    old = refusal(409, "1003 is not in onebot:2; its members: 1001, 1002")
    assert refusal_code(old) == "not_a_member"
    assert _refused(t, old, bot="1003", group="2") == t(
        "refused.not_member", bot="1003", group="2", members=t.join(["1001", "1002"])
    )
    assert refusal_code(refusal(404, "no bot onebot:7777 is known")) == "unknown_bot"
    assert refusal_code(refusal(404, "onebot:5 has no pin")) == "nothing_to_end"
    assert refusal_code(refusal(400, "until: not a time")) == "invalid_until"
    assert refusal_code(refusal(403, "forbidden")) == "forbidden"
    # Neither a known code nor known words: shown as the service gave it.
    odd = refusal(418, "I'm a teapot", "teapot")
    assert _refused(t, odd) == t("rejected", error=odd)
