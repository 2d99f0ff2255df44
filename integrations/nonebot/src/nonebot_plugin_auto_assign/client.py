"""The auto-assign service's HTTP API, as this plugin uses it (httpx, whatever NoneBot driver).

Routes: ``POST /v1/ingress`` (claims), ``POST /v1/gate/owned`` (the plugin's own commands in a
group an operator holds), ``PUT|DELETE /v1/fleet/reporters/{name}``,
``POST /v1/fleet/reporters/{name}/events`` and ``/heartbeat`` (the fleet source, and the
group message counts),
``GET /v1/assignments/stream?reporter={name}`` (Server-Sent Events; naming the reporter makes
the open stream its sign of life) and ``GET /v1/bots``; for the commands,
``GET /v1/status``, ``GET /v1/explain/{platform}/{channel}``,
``GET /v1/assignments/{platform}/{channel}``, ``POST /v1/rebalance[?dryRun=true]``, and the
operator's ``/v1/pins/{platform}/{channel}`` and ``/v1/drains/{platform}/{bot}`` (``GET`` lists,
``PUT`` sets, ``DELETE`` ends). A change refused by a follower (409 naming the leader) is sent
once more, to the leader's API address.

The token's role (``api.tokens``): the plugin's own work (reporting, claims, the stream) needs
``report``; the changing commands need ``admin`` (``api.token`` is one). A lesser role is
refused with 403 and ``"code": "forbidden"`` (``Rejected.forbidden``).

HTTPS: ``https://`` URLs are verified against the system's roots, or against the CA that
``AUTO_ASSIGN_CA_FILE`` names (``tls_context``); a certificate that does not verify raises
``TlsRefused``, whose message says so and names the setting.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncGenerator
from typing import Any
from urllib.parse import quote

import httpx

STREAM_READ_TIMEOUT = 45.0
"""The service sends a keep-alive comment every 15 s: three missed ones mean a dead stream."""
CHANGE_TIMEOUT = 10.0
"""Seconds an operator's change may take: the service waits up to 5 s for its database to
store it (then answers 202), plus the way there and back."""


class Unreachable(Exception):
    """The service could not be reached or answered with a server error (5xx)."""


class TlsRefused(Unreachable):
    """The service's TLS certificate did not verify (signed by a CA not trusted, or for another
    name): a configuration error, not an outage."""


class UnknownReporter(Exception):
    """409: the service does not know this reporter (it restarted, or the reporter was silent
    for longer than ``offlineGrace``): the full state must be sent again."""


class Rejected(Exception):
    """Any other error status (4xx): a request the service refuses (a bug, a wrong token, or
    an operator's change the service refuses: ``body`` is its JSON answer)."""

    def __init__(self, message: str, status: int = 0, body: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body: dict[str, Any] = body or {}

    @property
    def error(self) -> str:
        """The service's own words (``{"error": ...}``), else the whole message."""
        error = self.body.get("error")
        return error if isinstance(error, str) else str(self)

    @property
    def code(self) -> str | None:
        """The refusal's stable word (``{"code": ...}``: ``unknown_bot``, ``not_a_member``,
        ``forbidden``, ...); ``None`` from a service older than the codes."""
        code = self.body.get("code")
        return code if isinstance(code, str) and code else None

    @property
    def forbidden(self) -> bool:
        """403: the token is valid but its role may not do this (``api.tokens``)."""
        return self.status == 403

    @property
    def leader(self) -> tuple[str | None, str | None] | None:
        """A follower's 409: the leader's instance name and API address (either may be
        unknown); ``None`` for any other refusal."""
        leader = self.body.get("leader")
        if self.status != 409 or not isinstance(leader, dict):
            return None
        instance, api = leader.get("instance"), leader.get("api")
        return (
            instance if isinstance(instance, str) else None,
            api if isinstance(api, str) and api else None,
        )


def _check(response: httpx.Response, conflict_is_reporter: bool = True) -> httpx.Response:
    """The response if it succeeded. A 409 is ``UnknownReporter`` (the fleet routes' meaning)
    unless ``conflict_is_reporter`` is false (the operator's routes: ``Rejected``)."""
    status = response.status_code
    if status < 300:
        return response
    body: dict[str, Any] = {}
    try:
        parsed = response.json()
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        body = parsed
    message = body.get("error", response.text)
    if status == 409 and conflict_is_reporter:
        raise UnknownReporter(message)
    if status >= 500:
        raise Unreachable(f"HTTP {status}: {message}")
    raise Rejected(f"HTTP {status}: {message}", status, body)


def unreachable(e: httpx.HTTPError, url: object) -> Unreachable:
    """The exception for a request that failed on its way: ``TlsRefused`` when the service's
    certificate did not verify, else ``Unreachable``."""
    cause: BaseException | None = e
    for _ in range(10):  # a chain of causes, never a cycle in practice: bounded anyway
        if cause is None:
            break
        if isinstance(cause, ssl.SSLCertVerificationError):
            why = f"certificate verify failed: {cause.verify_message or cause.reason or cause}"
            return TlsRefused(
                f"TLS: the certificate of {url} was refused ({why}); AUTO_ASSIGN_CA_FILE must "
                "name the CA (PEM) that signed it"
            )
        cause = cause.__cause__ or cause.__context__
    return Unreachable(f"{type(e).__name__}: {e}")


def tls_context(ca_file: str) -> ssl.SSLContext:
    """The TLS settings for ``https://`` URLs: the CA in ``ca_file`` (PEM) is trusted, and only
    it. Raises ``OSError`` or ``ssl.SSLError`` when the file cannot be read or holds no
    certificate."""
    return ssl.create_default_context(cafile=ca_file)


def _segment(value: str) -> str:
    """A path segment with everything but unreserved characters percent-encoded."""
    return quote(value, safe="")


class ServiceClient:
    def __init__(
        self,
        base_url: str,
        token: str,
        timeout: float,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        """``verify``: for ``https://``, the TLS settings (``tls_context``), or ``True`` for
        the system's roots."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.base_url = base_url.rstrip("/")
        # trust_env=False: a user's HTTP(S)_PROXY (or SSL_CERT_FILE) must not capture or
        # change calls to the service.
        self.http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout),
            trust_env=False,
            verify=verify,
        )
        self.timeout = timeout

    @property
    def closed(self) -> bool:
        return self.http.is_closed

    async def aclose(self) -> None:
        await self.http.aclose()

    async def _request(
        self, method: str, path: str, *, conflict_is_reporter: bool = True, **kwargs: Any
    ) -> httpx.Response:
        try:
            response = await self.http.request(method, path, **kwargs)
        except httpx.HTTPError as e:
            raise unreachable(e, self.base_url) from e
        return _check(response, conflict_is_reporter)

    async def _change(self, method: str, path: str, **kwargs: Any) -> tuple[Any, str | None]:
        """An operator's change: its JSON answer, and the leader's address when a follower sent
        it there (``None``: the configured service made it). A follower's 409 is answered by
        sending the change once more, to the leader it names; whatever the leader answers
        stands. The service answers a change once stored, or after 5 s (202, ``stored:
        false``) when its database does not answer: a shorter timeout would call that a
        failure."""
        kwargs.setdefault("timeout", max(self.timeout, CHANGE_TIMEOUT))
        try:
            response = await self._request(method, path, conflict_is_reporter=False, **kwargs)
            return (response.json() if response.content else None), None
        except Rejected as e:
            leader = e.leader
            if leader is None or leader[1] is None:
                raise
            api = leader[1].rstrip("/")
        response = await self._request(method, api + path, conflict_is_reporter=False, **kwargs)
        return (response.json() if response.content else None), api

    async def ingress(self, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /v1/ingress`` → ``{"handle", "reason", "assignee"?}``."""
        response = await self._request("POST", "/v1/ingress", json=body)
        decision: dict[str, Any] = response.json()
        return decision

    async def owned_gate(self, plugin: str, group: str, bot: str, seconds: float) -> bool:
        """``POST /v1/gate/owned``: does ``bot`` own ``plugin`` in ``group``? The first bot to
        ask takes it for ``seconds``; others asking meanwhile are refused."""
        response = await self._request(
            "POST",
            "/v1/gate/owned",
            json={
                "plugin": plugin,
                "group_id": int(group),
                "bot_id": int(bot),
                "gate_sec": seconds,
            },
        )
        return bool(response.json().get("granted"))

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

    async def rebalance(self) -> str | None:
        """``POST /v1/rebalance`` (202); a follower's 409 is sent on to the leader it names.
        Returns the leader's address when it went there."""
        _, via = await self._change("POST", "/v1/rebalance")
        return via

    async def dry_run(self) -> dict[str, Any]:
        """``POST /v1/rebalance?dryRun=true``: what a rebalance would move now, per platform
        (moves, each bot's load before and after, Σ load²); nothing changes. A follower
        answers too, from its own view."""
        response = await self._request(
            "POST", "/v1/rebalance", params={"dryRun": "true"}, conflict_is_reporter=False
        )
        run: dict[str, Any] = response.json()
        return run

    async def pins(self) -> list[dict[str, Any]]:
        """``GET /v1/pins``: every pin and hold, with its ``state`` and the group's assignee."""
        response = await self._request("GET", "/v1/pins", conflict_is_reporter=False)
        pins: list[dict[str, Any]] = response.json().get("pins") or []
        return pins

    async def drains(self) -> list[dict[str, Any]]:
        """``GET /v1/drains``: every drained bot, with ``kept`` (the groups it still answers)."""
        response = await self._request("GET", "/v1/drains", conflict_is_reporter=False)
        drains: list[dict[str, Any]] = response.json().get("drains") or []
        return drains

    async def pin(
        self,
        platform: str,
        channel: str,
        bot: str | None,
        until: str | None = None,
        note: str | None = None,
    ) -> tuple[dict[str, Any], str | None]:
        """``PUT /v1/pins/{platform}/{channel}``: pins the group to ``bot``, or holds it with no
        assignee (``None``). Returns the pin as stored, and the leader's address when a
        follower sent the change there."""
        body: dict[str, Any] = {"bot": bot}
        if until is not None:
            body["until"] = until
        if note is not None:
            body["note"] = note
        pin, via = await self._change(
            "PUT", f"/v1/pins/{_segment(platform)}/{_segment(channel)}", json=body
        )
        return dict(pin or {}), via

    async def unpin(self, platform: str, channel: str) -> tuple[dict[str, Any], str | None]:
        """``DELETE /v1/pins/{platform}/{channel}``: the pin or hold removed."""
        pin, via = await self._change(
            "DELETE", f"/v1/pins/{_segment(platform)}/{_segment(channel)}"
        )
        return dict(pin or {}), via

    async def drain(
        self, platform: str, bot: str, until: str | None = None, note: str | None = None
    ) -> tuple[dict[str, Any], str | None]:
        """``PUT /v1/drains/{platform}/{bot}``."""
        body: dict[str, Any] = {}
        if until is not None:
            body["until"] = until
        if note is not None:
            body["note"] = note
        drain, via = await self._change(
            "PUT", f"/v1/drains/{_segment(platform)}/{_segment(bot)}", json=body
        )
        return dict(drain or {}), via

    async def undrain(self, platform: str, bot: str) -> tuple[dict[str, Any], str | None]:
        """``DELETE /v1/drains/{platform}/{bot}``."""
        drain, via = await self._change(
            "DELETE", f"/v1/drains/{_segment(platform)}/{_segment(bot)}"
        )
        return dict(drain or {}), via

    async def stream(
        self, reporter: str | None = None
    ) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
        """``GET /v1/assignments/stream[?reporter=name]``: yields ``(event, data)`` until the
        stream ends. Named, the stream is the reporter's sign of life: when all its streams
        have closed and none came back within ``sources.http.streamGrace`` (0.5 s), the
        service takes its bots offline."""
        timeout = httpx.Timeout(self.timeout, read=STREAM_READ_TIMEOUT)
        params = {"reporter": reporter} if reporter else None
        try:
            async with self.http.stream(
                "GET",
                "/v1/assignments/stream",
                params=params,
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
            raise unreachable(e, self.base_url) from e
