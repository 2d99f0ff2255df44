"""The auto-assign service's HTTP API, as this plugin uses it (httpx, whatever NoneBot driver).

Routes: ``POST /v1/ingress`` (claims), ``PUT|DELETE /v1/fleet/reporters/{name}``,
``POST /v1/fleet/reporters/{name}/events`` and ``/heartbeat`` (the fleet source, and the
group message counts),
``GET /v1/assignments/stream`` (Server-Sent Events) and ``GET /v1/bots``; for the commands,
``GET /v1/status``, ``GET /v1/explain/{platform}/{channel}``,
``GET /v1/assignments/{platform}/{channel}`` and ``POST /v1/rebalance``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any
from urllib.parse import quote

import httpx

STREAM_READ_TIMEOUT = 45.0
"""The service sends a keep-alive comment every 15 s: three missed ones mean a dead stream."""


class Unreachable(Exception):
    """The service could not be reached or answered with a server error (5xx)."""


class UnknownReporter(Exception):
    """409: the service does not know this reporter (it restarted, or the reporter was silent
    for longer than ``offlineGrace``): the full state must be sent again."""


class Rejected(Exception):
    """Any other error status (4xx): a request the service refuses (a bug or a wrong token)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


def _check(response: httpx.Response) -> httpx.Response:
    status = response.status_code
    if status < 300:
        return response
    try:
        message = response.json().get("error", response.text)
    except ValueError:
        message = response.text
    if status == 409:
        raise UnknownReporter(message)
    if status >= 500:
        raise Unreachable(f"HTTP {status}: {message}")
    raise Rejected(f"HTTP {status}: {message}", status)


def _segment(value: str) -> str:
    """A path segment with everything but unreserved characters percent-encoded."""
    return quote(value, safe="")


class ServiceClient:
    def __init__(self, base_url: str, token: str, timeout: float) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        # trust_env=False: a user's HTTP(S)_PROXY must not capture calls to the service.
        self.http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers=headers,
            timeout=httpx.Timeout(timeout),
            trust_env=False,
        )
        self.timeout = timeout

    @property
    def closed(self) -> bool:
        return self.http.is_closed

    async def aclose(self) -> None:
        await self.http.aclose()

    async def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = await self.http.request(method, path, **kwargs)
        except httpx.HTTPError as e:
            raise Unreachable(f"{type(e).__name__}: {e}") from e
        return _check(response)

    async def ingress(self, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /v1/ingress`` → ``{"handle", "reason", "assignee"?}``."""
        response = await self._request("POST", "/v1/ingress", json=body)
        decision: dict[str, Any] = response.json()
        return decision

    async def put_reporter(self, name: str, bots: list[dict[str, Any]]) -> None:
        await self._request("PUT", f"/v1/fleet/reporters/{name}", json={"bots": bots})

    async def reporter_events(self, name: str, events: list[dict[str, Any]]) -> None:
        await self._request(
            "POST", f"/v1/fleet/reporters/{name}/events", json={"events": events}
        )

    async def heartbeat(self, name: str) -> None:
        await self._request("POST", f"/v1/fleet/reporters/{name}/heartbeat", json={})

    async def delete_reporter(self, name: str) -> None:
        await self._request("DELETE", f"/v1/fleet/reporters/{name}")

    async def bots(self) -> list[dict[str, Any]]:
        """``GET /v1/bots``: every bot the service knows, with ``online``."""
        response = await self._request("GET", "/v1/bots")
        bots: list[dict[str, Any]] = response.json()
        return bots

    async def status(self) -> dict[str, Any]:
        """``GET /v1/status``: per platform the numbers of the last plan, and ``last_run``."""
        response = await self._request("GET", "/v1/status")
        status: dict[str, Any] = response.json()
        return status

    async def explain(self, platform: str, channel: str) -> dict[str, Any]:
        """``GET /v1/explain/{platform}/{channel}``: the assignee, the reason and the members."""
        response = await self._request(
            "GET", f"/v1/explain/{_segment(platform)}/{_segment(channel)}"
        )
        explanation: dict[str, Any] = response.json()
        return explanation

    async def assignment(self, platform: str, channel: str) -> dict[str, Any]:
        """``GET /v1/assignments/{platform}/{channel}``: ``assignee``, ``excluded``,
        ``committed``."""
        response = await self._request(
            "GET", f"/v1/assignments/{_segment(platform)}/{_segment(channel)}"
        )
        assignment: dict[str, Any] = response.json()
        return assignment

    async def rebalance(self) -> None:
        """``POST /v1/rebalance`` (202). An instance that follows a leader answers 409: raised
        as ``Rejected`` with ``status`` 409 (the message names the leader)."""
        try:
            await self._request("POST", "/v1/rebalance")
        except UnknownReporter as e:  # _check's name for any 409
            raise Rejected(str(e), 409) from e

    async def stream(self) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
        """``GET /v1/assignments/stream``: yields ``(event, data)`` until the stream ends."""
        timeout = httpx.Timeout(self.timeout, read=STREAM_READ_TIMEOUT)
        try:
            async with self.http.stream(
                "GET",
                "/v1/assignments/stream",
                headers={"Accept": "text/event-stream"},
                timeout=timeout,
            ) as response:
                if response.status_code >= 300:
                    await response.aread()
                    _check(response)
                event, data = "message", list[str]()
                async for line in response.aiter_lines():
                    if not line:
                        if data:
                            yield event, json.loads("\n".join(data))
                        event, data = "message", list[str]()
                    elif line.startswith(":"):
                        continue  # keep-alive comment
                    else:
                        field, _, value = line.partition(":")
                        value = value[1:] if value.startswith(" ") else value
                        if field == "event":
                            event = value
                        elif field == "data":
                            data.append(value)
        except httpx.HTTPError as e:
            raise Unreachable(f"{type(e).__name__}: {e}") from e
