"""The real auto-assign service binary, run as a child process for the tests."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import ssl
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

import httpx

PACKAGE = Path(__file__).resolve().parent.parent
DEFAULT_BINARY = PACKAGE / ".." / ".." / "target" / "release" / "auto-assign"
TOKEN = "nonebug-secret"  # also in tests/.env.test, read by NoneBot as AUTO_ASSIGN_TOKEN
"""``api.token``: the ``admin`` role."""
REPORT_TOKEN = "nonebug-report"
"""An ``api.tokens`` entry of the ``report`` role: what the plugin needs for its own work."""
READ_TOKEN = "nonebug-read"
"""An ``api.tokens`` entry of the ``read`` role."""
PLATFORM = "onebot"

CONFIG = """\
api:
  bind: "127.0.0.1:{port}"
  token: {token}
  tokens:
    - {{name: plugins, token: {report}, role: report}}
    - {{name: viewer, token: {read}, role: read}}
{tls}sources: {{http: {{startupWait: 0, offlineGrace: 30, streamGrace: 0.5}}}}
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


class Tls(NamedTuple):
    """The service's HTTPS: its certificate and key (``api.tls``), and the CA that signed
    it (for the tests' own requests)."""

    cert: Path
    key: Path
    ca: Path


class Service:
    """``auto-assign serve`` in a temporary directory on a free loopback port."""

    def __init__(
        self,
        exclude: list[str],
        dir: Path | None = None,
        name: str = "config",
        tls: Tls | None = None,
    ) -> None:
        """``dir``: another service's directory, to share its SQLite database (two instances
        under leadership); ``name``: the config file's and the log's name there; ``tls``: the
        API over HTTPS."""
        self.exclude = exclude
        self.dir = dir or Path(tempfile.mkdtemp(prefix="auto-assign-nonebug-"))
        self.name = name
        self.port = free_port()
        self.tls = tls
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.verify: ssl.SSLContext | bool = (
            ssl.create_default_context(cafile=str(tls.ca)) if tls else True
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.configure()

    def configure(self, extra: str = NO_DELAYS) -> None:
        """Writes ``config.yaml``: the suite's settings plus ``extra`` (YAML lines; ``""``
        for the default trigger delays). Takes effect at the next start, or at once for the
        keys the service reloads (see ``reload``)."""
        tls = (
            f'  tls: {{certFile: "{self.tls.cert}", keyFile: "{self.tls.key}"}}\n'
            if self.tls
            else ""
        )
        (self.dir / f"{self.name}.yaml").write_text(
            CONFIG.format(
                port=self.port,
                token=TOKEN,
                report=REPORT_TOKEN,
                read=READ_TOKEN,
                tls=tls,
                exclude="[" + ", ".join(f'"{e}"' for e in self.exclude) + "]",
            )
            + extra
        )

    async def reload(self, extra: str, timeout: float = 10.0) -> None:
        """Rewrites the config with ``extra`` while the service runs, and waits until the
        service has reloaded it (``GET /v1/status``: ``config.reloads`` counts up)."""
        before = (await self.get("/v1/status"))["config"]["reloads"]
        self.configure(extra)
        deadline = time.monotonic() + timeout
        while (await self.get("/v1/status"))["config"]["reloads"] <= before:
            if time.monotonic() > deadline:
                raise AssertionError(f"the service did not reload its config:\n{self.log()}")
            await asyncio.sleep(0.05)

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
        log = open(self.dir / f"{self.name}.log", "ab")
        self.proc = subprocess.Popen(
            [str(binary()), "serve", "--config", f"{self.name}.yaml"],
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
                healthz = httpx.get(
                    f"{self.url}/healthz", timeout=1.0, trust_env=False, verify=self.verify
                )
                if healthz.is_success:
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
            return (self.dir / f"{self.name}.log").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    # ------------------------------------------------------------------ the API, for tests
    async def get(self, path: str) -> Any:
        async with httpx.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"Bearer {TOKEN}"},
            trust_env=False,
            verify=self.verify,
        ) as c:
            r = await c.get(path)
            r.raise_for_status()
            return r.json()

    async def post(self, path: str, body: dict[str, Any]) -> Any:
        async with httpx.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"Bearer {TOKEN}"},
            trust_env=False,
            verify=self.verify,
        ) as c:
            r = await c.post(path, json=body)
            r.raise_for_status()
            return r.json()

    async def delete(self, path: str) -> None:
        async with httpx.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"Bearer {TOKEN}"},
            trust_env=False,
            verify=self.verify,
        ) as c:
            r = await c.delete(path)
            r.raise_for_status()

    async def put(self, path: str, body: dict[str, Any]) -> Any:
        async with httpx.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"Bearer {TOKEN}"},
            trust_env=False,
            verify=self.verify,
        ) as c:
            r = await c.put(path, json=body)
            r.raise_for_status()
            return r.json()

    async def pins(self) -> dict[str, dict[str, Any]]:
        """``GET /v1/pins`` on the platform: group → its pin (``bot`` ``None``: held)."""
        return {
            p["channel"]: p for p in (await self.get("/v1/pins"))["pins"] if p["platform"] == PLATFORM
        }

    async def drains(self) -> dict[str, dict[str, Any]]:
        """``GET /v1/drains`` on the platform: bot → its drain."""
        return {
            d["bot"]: d
            for d in (await self.get("/v1/drains"))["drains"]
            if d["platform"] == PLATFORM
        }

    async def clear_overrides(self) -> None:
        """Ends every pin, hold and drain (between tests)."""
        for group in await self.pins():
            await self.delete(f"/v1/pins/{PLATFORM}/{group}")
        for bot in await self.drains():
            await self.delete(f"/v1/drains/{PLATFORM}/{bot}")

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
