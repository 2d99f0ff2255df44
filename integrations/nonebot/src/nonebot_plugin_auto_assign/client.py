"""The auto-assign service's HTTP API, as this plugin uses it (httpx, whatever NoneBot driver).

Routes: ``POST /v1/ingress`` (claims), ``PUT|DELETE /v1/fleet/reporters/{name}``,
``POST /v1/fleet/reporters/{name}/events`` and ``/heartbeat`` (the fleet source, and the
group message counts),
``GET /v1/assignments/stream`` (Server-Sent Events) and ``GET /v1/bots``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

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
