"""Real NoneBot processes for the tests, and a small simulated OneBot v11 implementation that
connects their bots.

``NoneBotProcess``: ``python tests/nonebot_app.py`` in a directory of its own with its own
``.env`` (the FastAPI driver on a free loopback port, this plugin, the echo plugin), as a bot
project runs. ``OneBot``: one bot account, as NapCat or Lagrange would be: it connects to the
process's reverse WebSocket (``/onebot/v11/ws``, ``X-Self-ID``), sends group messages as
OneBot events, answers the actions NoneBot calls (``get_group_list``, ``send_group_msg``,
``send_msg``, ...) and records every message the bot sends.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from .service import PACKAGE, free_port

APP = PACKAGE / "tests" / "nonebot_app.py"


class NoneBotProcess:
    """A NoneBot process running this plugin, with ``settings`` in its ``.env``."""

    def __init__(self, name: str, settings: dict[str, str], log_level: str = "INFO") -> None:
        self.name = name
        self.dir = Path(tempfile.mkdtemp(prefix=f"auto-assign-nonebot-{name}-"))
        self.port = free_port()
        env = {
            "DRIVER": "~fastapi",
            "HOST": "127.0.0.1",
            "PORT": str(self.port),
            "LOG_LEVEL": log_level,
            "COMMAND_START": '["/"]',
            "SUPERUSERS": '["4242"]',
            "AUTO_ASSIGN_REPORTER": name,
            **settings,
        }
        (self.dir / ".env").write_text("".join(f"{k}={v}\n" for k, v in env.items()))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = open(self.dir / "nonebot.log", "ab")
        environment = {
            k: v for k, v in os.environ.items() if not k.upper().startswith("AUTO_ASSIGN_")
        }
        environment["PYTHONPATH"] = str(PACKAGE)  # tests.plugins.echo
        environment["PYTHONUNBUFFERED"] = "1"
        self.proc = subprocess.Popen(
            [sys.executable, str(APP)],
            cwd=self.dir,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environment,
        )
        log.close()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/onebot/v11/ws"

    def kill(self) -> None:
        """SIGKILL: no shutdown hook runs, the kernel closes its connections."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def log(self, tail: int = 6000) -> str:
        try:
            return (self.dir / "nonebot.log").read_text(errors="replace")[-tail:]
        except OSError:
            return ""

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@dataclass
class Sent:
    """A message the bot sent (``send_group_msg`` or ``send_msg``)."""

    at: float
    """``time.monotonic()`` when the simulator received the action."""
    group: int
    text: str


_message_ids = itertools.count(1)


class OneBot:
    """One simulated OneBot v11 account (``self_id``) in ``groups``, connected to a NoneBot
    process over its reverse WebSocket."""

    def __init__(self, self_id: str, groups: list[str]) -> None:
        self.self_id = self_id
        self.groups = groups
        self.sent: list[Sent] = []
        self.ws: ClientConnection | None = None
        self.closed = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None

    async def connect(self, process: NoneBotProcess, timeout: float = 30.0) -> None:
        """Connects once the process listens (it may still be starting)."""
        deadline = time.monotonic() + timeout
        while True:
            if process.proc is not None and process.proc.poll() is not None:
                raise AssertionError(f"NoneBot {process.name} exited:\n{process.log()}")
            try:
                self.ws = await connect(
                    process.url,
                    additional_headers={"X-Self-ID": self.self_id, "X-Client-Role": "Universal"},
                    open_timeout=5,
                    ping_interval=None,
                )
                break
            except (OSError, asyncio.TimeoutError):
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"NoneBot {process.name} did not accept the connection:\n{process.log()}"
                    ) from None
                await asyncio.sleep(0.1)
        self.closed.clear()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.ws is not None
        try:
            async for raw in self.ws:
                call = json.loads(raw)
                data = self._action(str(call.get("action")), call.get("params") or {})
                await self.ws.send(
                    json.dumps(
                        {"status": "ok", "retcode": 0, "data": data, "echo": call.get("echo")}
                    )
                )
        except ConnectionClosed:
            pass
        finally:
            self.closed.set()

    def _action(self, action: str, params: dict[str, Any]) -> Any:
        if action == "get_group_list":
            return [
                {"group_id": int(g), "group_name": f"group {g}", "member_count": 10,
                 "max_member_count": 200}
                for g in self.groups
            ]
        if action in ("send_group_msg", "send_msg"):
            self.sent.append(
                Sent(time.monotonic(), int(params.get("group_id", 0)), _plain(params["message"]))
            )
            return {"message_id": next(_message_ids)}
        if action == "get_login_info":
            return {"user_id": int(self.self_id), "nickname": f"bot {self.self_id}"}
        return None

    async def group_message(
        self, group: str, text: str, *, user: int = 42, when: int, message_id: int
    ) -> bool:
        """Sends a group message event; ``False`` when the connection is gone. The same message
        delivered to several bots must have the same ``when`` (its time) and user."""
        if self.ws is None or self.closed.is_set():
            return False
        event = {
            "time": when,
            "self_id": int(self.self_id),
            "post_type": "message",
            "message_type": "group",
            "sub_type": "normal",
            "message_id": message_id,
            "group_id": int(group),
            "user_id": user,
            "anonymous": None,
            "message": [{"type": "text", "data": {"text": text}}],
            "raw_message": text,
            "font": 0,
            "sender": {"user_id": user, "nickname": "alice", "card": "", "role": "member"},
        }
        try:
            await self.ws.send(json.dumps(event))
        except ConnectionClosed:
            return False
        return True

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self._reader is not None:
            await self._reader


def _plain(message: Any) -> str:
    """A message as NoneBot sends it (a string or a list of segments) as plain text."""
    if isinstance(message, str):
        return message
    return "".join(
        str(s.get("data", {}).get("text", "")) for s in message if s.get("type") == "text"
    )
