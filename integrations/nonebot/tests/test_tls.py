"""The service over HTTPS (``api.tls``) with a CA made in the test: a real NoneBot process
that trusts the CA (``AUTO_ASSIGN_CA_FILE``) reports its bot, follows the stream and answers
commands over HTTPS; one that trusts another CA refuses the certificate and says so in its log
and in its replies. A CA file that cannot be read trusts nothing."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import tempfile
from pathlib import Path

import pytest

from .certs import Authority
from .helpers import wait_until
from .processes import NoneBotProcess, OneBot
from .service import PLATFORM, REPORT_TOKEN, Service


async def _say(onebot: OneBot, group: str, text: str, n: int) -> str:
    """Sends ``text`` in ``group`` and returns the bot's reply (the first message it sends
    after it)."""
    before = len(onebot.sent)
    assert await onebot.group_message(group, text, when=1_790_100_000 + n, message_id=n)
    await wait_until(lambda: len(onebot.sent) > before, timeout=10.0, what=f"a reply to {text!r}")
    reply = onebot.sent[before]
    assert reply.group == int(group)
    return reply.text


async def test_the_plugin_over_https(capsys: pytest.CaptureFixture[str]) -> None:
    dir = Path(tempfile.mkdtemp(prefix="auto-assign-tls-"))
    ca, other = Authority(dir, "ca"), Authority(dir, "other-ca")
    service = Service(exclude=[], tls=ca.server())
    assert service.url.startswith("https://")
    service.start()
    trusting = NoneBotProcess(
        "tls-trusting",
        {
            "AUTO_ASSIGN_URL": service.url,
            "AUTO_ASSIGN_CA_FILE": str(ca.pem),
            "AUTO_ASSIGN_TOKEN": REPORT_TOKEN,
        },
    )
    refusing = NoneBotProcess(
        "tls-refusing",
        {
            "AUTO_ASSIGN_URL": service.url,
            "AUTO_ASSIGN_CA_FILE": str(other.pem),
            "AUTO_ASSIGN_TOKEN": REPORT_TOKEN,
            "AUTO_ASSIGN_LANGUAGE": "en",
        },
    )
    good, bad = OneBot("3001", ["601", "602"]), OneBot("3002", ["603"])
    try:
        trusting.start()
        refusing.start()
        await good.connect(trusting)
        await bad.connect(refusing)

        # Reported over HTTPS: the service knows the bot and assigns its groups to it.
        async def reported() -> bool:
            return (
                "3001" in await service.online_bots()
                and await service.assignment() == {"601": "3001", "602": "3001"}
            )

        await wait_until(reported, timeout=30.0, what="3001 reported over HTTPS")
        # The gate, and the commands, over HTTPS.
        assert await _say(good, "601", "tick 1", 1) == "echo tick 1 from 3001"
        status = (await _say(good, "601", "/aa status", 2)).splitlines()
        assert status[0] == "auto-assign 服务：可连接；分配流：已连接", status
        assert "本进程（tls-trusting）：3001" in status, status
        explain = (await _say(good, "602", "/分配 解释", 3)).splitlines()
        assert explain[0] == "群 602：由 3001 应答。", explain

        # The other CA's certificate is refused, with a clear log line and reply.
        expected = (
            f"TLS: the certificate of {service.url} was refused (certificate verify failed: "
            "unable to get local issuer certificate); AUTO_ASSIGN_CA_FILE must name the CA "
            "(PEM) that signed it"
        )
        await wait_until(
            lambda: f"auto-assign: assignment stream: {expected}" in refusing.log(),
            timeout=15.0,
            what="the refused certificate in the log",
        )
        await wait_until(
            lambda: f"auto-assign: reporter tls-refusing: {expected}; retrying" in refusing.log(),
            timeout=15.0,
            what="the reporter's refused certificate in the log",
        )
        reply = (await _say(bad, "603", "/aa status", 4)).splitlines()
        assert reply[0] == f"auto-assign service: unreachable ({expected})", reply
        assert "3002" not in {b["bot"] for b in await service.get("/v1/bots")}

        # The stream over HTTPS names the reporter: killed, its bot goes offline within the
        # stream's grace.
        trusting.kill()

        async def offline() -> bool:
            return "3001" not in await service.online_bots()

        await wait_until(offline, timeout=3.0, what="3001 offline after the kill")
        assert "fleet reporter tls-trusting: its assignment stream closed" in service.log()
        with capsys.disabled():
            line = next(ln for ln in refusing.log().splitlines() if expected in ln)
            print(f"\nTLS: another CA's certificate refused, logged as:\n  {line.strip()}")
    finally:
        await good.close()
        await bad.close()
        trusting.cleanup()
        refusing.cleanup()
        service.stop()
        shutil.rmtree(service.dir, ignore_errors=True)
        shutil.rmtree(dir, ignore_errors=True)


async def test_a_ca_file_that_cannot_be_read_trusts_nothing(tmp_path: Path) -> None:
    from nonebot import logger

    from nonebot_plugin_auto_assign import _verify, config

    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(m.record["message"]), level="ERROR")
    saved = config.auto_assign_ca_file
    try:
        config.auto_assign_ca_file = ""
        assert _verify() is True  # the system's roots
        missing = tmp_path / "missing.pem"
        config.auto_assign_ca_file = str(missing)
        context = _verify()
        assert isinstance(context, ssl.SSLContext)
        assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
        assert context.get_ca_certs() == []
        assert any(
            f"AUTO_ASSIGN_CA_FILE '{missing}' cannot be used" in line
            and "no TLS certificate of the service will be trusted" in line
            for line in lines
        ), lines
        garbage = tmp_path / "garbage.pem"
        garbage.write_text("not a certificate\n")
        config.auto_assign_ca_file = str(garbage)
        assert isinstance(_verify(), ssl.SSLContext)
        assert sum("cannot be used" in line for line in lines) == 2
        await asyncio.sleep(0)
    finally:
        config.auto_assign_ca_file = saved
        logger.remove(sink)
