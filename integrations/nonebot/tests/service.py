"""The real auto-assign service binary, run as a child process for the tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

PACKAGE = Path(__file__).resolve().parent.parent
DEFAULT_BINARY = PACKAGE / ".." / ".." / "target" / "release" / "auto-assign"
TOKEN = "nonebug-secret"  # also in tests/.env.test, read by NoneBot as AUTO_ASSIGN_TOKEN
PLATFORM = "onebot"

CONFIG = """\
api: {{bind: "127.0.0.1:{port}", token: {token}}}
sources: {{http: {{startupWait: 0, offlineGrace: 30}}}}
database: {{url: "sqlite://state.db"}}
excludeChannels: {exclude}
"""
NO_DELAYS = (
    "triggerDelays: {startup: 0, botOnline: 0, botOffline: 0, botStatus: 0, channelJoined: 0, "
    "channelLeft: 0}\n"
)
"""The suite's usual trigger delays: none, so that rebalances follow events at once."""


def binary() -> Path:
    return Path(os.environ.get("AUTO_ASSIGN_BIN") or DEFAULT_BINARY).resolve()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Service:
    """``auto-assign serve`` in a temporary directory on a free loopback port."""

    def __init__(self, exclude: list[str]) -> None:
        self.exclude = exclude
        self.dir = Path(tempfile.mkdtemp(prefix="auto-assign-nonebug-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.configure()

    def configure(self, extra: str = NO_DELAYS) -> None:
        """Writes ``config.yaml``: the suite's settings plus ``extra`` (YAML lines; ``""``
        for the default trigger delays). Takes effect at the next start."""
        (self.dir / "config.yaml").write_text(
            CONFIG.format(
                port=self.port,
                token=TOKEN,
                exclude="[" + ", ".join(f'"{e}"' for e in self.exclude) + "]",
            )
            + extra
        )

    def forget(self) -> None:
        """Deletes the stored assignment (while stopped): the next start begins afresh."""
        assert not self.running
        for f in self.dir.glob("state.db*"):
            f.unlink()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 15.0) -> None:
        assert not self.running
        log = open(self.dir / "service.log", "ab")
        self.proc = subprocess.Popen(
            [str(binary()), "serve", "--config", "config.yaml"],
            cwd=self.dir,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "info")},
        )
        log.close()
        self.starts += 1
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"auto-assign exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1.0, trust_env=False).is_success:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"auto-assign did not answer /healthz:\n{self.log()}")
            time.sleep(0.05)

    def stop(self, timeout: float = 10.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def log(self) -> str:
        try:
            return (self.dir / "service.log").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    # ------------------------------------------------------------------ the API, for tests
    async def get(self, path: str) -> Any:
        async with httpx.AsyncClient(
            base_url=self.url, headers={"Authorization": f"Bearer {TOKEN}"}, trust_env=False
        ) as c:
            r = await c.get(path)
            r.raise_for_status()
            return r.json()

    async def post(self, path: str, body: dict[str, Any]) -> Any:
        async with httpx.AsyncClient(
            base_url=self.url, headers={"Authorization": f"Bearer {TOKEN}"}, trust_env=False
        ) as c:
            r = await c.post(path, json=body)
            r.raise_for_status()
            return r.json()

    async def delete(self, path: str) -> None:
        async with httpx.AsyncClient(
            base_url=self.url, headers={"Authorization": f"Bearer {TOKEN}"}, trust_env=False
        ) as c:
            r = await c.delete(path)
            r.raise_for_status()

    async def weights(self) -> dict[str, float]:
        """``GET /v1/weights/onebot``: every known group's weight (messages a day)."""
        w: dict[str, float] = (await self.get(f"/v1/weights/{PLATFORM}"))["weights"]
        return w

    async def assignment(self) -> dict[str, str]:
        a: dict[str, str] = (await self.get(f"/v1/assignments?platform={PLATFORM}")).get(
            PLATFORM, {}
        )
        return a

    async def online_bots(self) -> set[str]:
        return {
            b["bot"]
            for b in await self.get("/v1/bots")
            if b["platform"] == PLATFORM and b["online"]
        }
