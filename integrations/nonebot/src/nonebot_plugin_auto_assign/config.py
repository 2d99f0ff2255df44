"""Plugin configuration, read with ``get_plugin_config`` from NoneBot's configuration.

Keys are flat and prefixed (``AUTO_ASSIGN_URL=...`` in ``.env`` / ``.env.prod``, an environment
variable, or a ``nonebot.init(auto_assign_url=...)`` keyword); NoneBot matches them case
insensitively. Values are plain strings or JSON.
"""

from __future__ import annotations

from typing import Any, Literal

from nonebot.compat import field_validator
from pydantic import BaseModel


class Config(BaseModel):
    """``AUTO_ASSIGN_*`` keys (the README lists them with their meaning)."""

    auto_assign_url: str = "http://127.0.0.1:8787"
    """Base URL of the auto-assign service's HTTP API (`api.bind`): ``http://`` or, with the
    service's `api.tls`, ``https://``."""

    auto_assign_token: str = ""
    """A token of the service (`api.token`, or one of `api.tokens`), sent as
    ``Authorization: Bearer <token>``. Its role: ``report`` for the plugin's work (reporting,
    claims, the stream, the reading commands); ``admin`` for the changing commands too."""

    auto_assign_ca_file: str = ""
    """For an ``https://`` URL: a PEM file with the CA certificate that signed the service's
    certificate (relative to NoneBot's working directory); only it is trusted then. Empty: the
    system's roots."""

    auto_assign_reporter: str = ""
    """This process's reporter name (``[A-Za-z0-9_.:-]``); empty: ``nonebot-<hostname>-<port>``.
    Every NoneBot process of a fleet needs its own."""

    auto_assign_platform: str = "onebot"
    """The platform name the service uses for these bots."""

    auto_assign_when_unreachable: Literal["answer", "silent"] = "answer"
    """A message that needs the service (no usable assignment known) while the service cannot
    be reached: every bot that received it answers (``answer``), or none does (``silent``)."""

    auto_assign_gate: Literal["all", "commands"] = "all"
    """``all``: every group message goes to one bot. ``commands``: only messages that trigger a
    registered command (NoneBot's ``COMMAND_START`` × ``on_command``) are gated; other messages
    reach every bot (the ``fanout`` lane)."""

    auto_assign_decide_locally: bool = True
    """``false``: ask the service (``POST /v1/ingress``) for every group message instead of
    deciding assigned groups from the stream. For deployments in a federate pool, whose
    pool-wide rules only the service knows; one round trip per message and bot."""

    auto_assign_enabled: bool = True
    """``false``: no gate (every bot handles everything); the fleet is still reported."""

    auto_assign_report_fleet: bool = True
    """``false``: do not report bots and group lists (the service learns the fleet from another
    source, e.g. its own OneBot connections)."""

    auto_assign_claim_plugin: str = "ingress_gate"
    """Claim namespace sent with claims (Pallas-Bot's default)."""

    auto_assign_timeout: float = 3.0
    """Seconds for one claim or report request."""

    auto_assign_heartbeat_interval: float = 10.0
    """Seconds between reporter heartbeats; keep it well below the service's
    ``sources.http.offlineGrace`` (default 30)."""

    auto_assign_resync_interval: float = 600.0
    """Seconds between full refreshes of every bot's group list (``get_group_list``), which
    catch joins and leaves whose notice was missed; 0 disables."""

    auto_assign_fleet_refresh_interval: float = 60.0
    """Seconds between reads of the service's bot list (``GET /v1/bots``), used to recognise
    messages of fleet bots and offline assignees of other processes; also read at every
    (re)connection of the stream and after every assignment change."""

    auto_assign_message_report_interval: float = 10.0
    """Seconds between two reports of the group message counts (the service's channel weights
    for ``balanceBy: messages``); they ride along with the reporter's requests. 0: messages
    are not counted."""

    auto_assign_retry_after: float = 5.0
    """After a claim failed because the service could not be reached, further claims within
    this many seconds apply ``when_unreachable`` at once instead of waiting for a timeout."""

    auto_assign_reconnect_max: float = 30.0
    """Longest wait between two attempts to reopen the assignment stream. A stream that drops
    is reopened at once (the service gives it ``sources.http.streamGrace``, 0.5 s, before it
    takes this process's bots offline); then after 0.5 s, doubling."""

    auto_assign_log_decisions: bool = False
    """Log every gate decision at DEBUG level (costs a few microseconds per message)."""

    auto_assign_language: Literal["zh", "en"] = "zh"
    """The language of the commands' replies: ``zh`` (中文) or ``en``. ``zh-CN``, ``en_US`` and
    the like are read as ``zh`` and ``en``."""

    auto_assign_read_permission: Literal["everyone", "admin", "superuser"] = "everyone"
    """Who may use the reading commands (``aa explain``, ``aa status``, ``aa pins``,
    ``aa drains``, the dry run): ``everyone``, ``admin`` (group owners and admins, and
    superusers) or ``superuser`` (``SUPERUSERS``). The changing commands (``aa rebalance``,
    ``pin``, ``hold``, ``unpin``, ``drain``, ``undrain``) are for superusers only, whatever this
    says."""

    @field_validator("auto_assign_language", mode="before")
    @classmethod
    def _language(cls, value: Any) -> Any:
        if isinstance(value, str):
            base = value.strip().lower().replace("_", "-").split("-", 1)[0]
            if base in ("zh", "en"):
                return base
        return value
