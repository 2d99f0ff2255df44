"""What the gate decides from: the streamed assignment and what is known of the fleet."""

from __future__ import annotations

from collections.abc import Mapping


class Assignment:
    """One platform's assignment (group → bot), kept by the assignment stream.

    ``version`` is the stream's version; a ``changes`` event must carry ``version + 1``,
    anything else means updates were missed and the stream is reopened (its first event is a
    fresh snapshot). While the stream is down the last known table stays in force.
    """

    def __init__(self, platform: str) -> None:
        self.platform = platform
        self.table: dict[str, str] = {}
        self.version: int | None = None
        self.connected = False
        """The stream is open and its snapshot applied."""
        self.snapshots = 0
        """Snapshots received (0: nothing is known yet)."""
        self.fleet: dict[str, bool] | None = None
        """Every bot the service knows on this platform → online (``GET /v1/bots``, kept
        current by the stream's ``presence`` events); ``None`` until read or told once."""
        self.heard: dict[str, tuple[int, bool]] = {}
        """Bots a ``presence`` event told of → (the event's number, online), for a read of
        the fleet that was under way meanwhile (it is older than the event)."""
        self.presences = 0
        """``presence`` events received (the number of the last one)."""
        self.ours: set[str] = set()
        """Bots that connected to this process. One of them that is not connected now is
        offline, whatever the last read of the fleet says, until the service reports it online
        after it heard of its disconnection here (it then runs elsewhere)."""
        self.held: set[str] = set()
        """Groups an operator holds with no assignee on purpose (``GET /v1/pins``, read with
        the fleet after every assignment change, and set by this plugin's own ``aa hold``):
        nobody answers there but a mentioned bot and the plugin's own commands."""
        self.pins_unsupported = False
        """The service has no ``/v1/pins`` (older than the operator's routes): not asked again
        until the stream reconnects."""

    def set_pins(self, pins: list[dict[str, object]]) -> None:
        """Applies a read of ``GET /v1/pins``: its holds on this platform."""
        self.held = {
            str(p["channel"])
            for p in pins
            if p.get("platform") == self.platform and p.get("bot") is None and "channel" in p
        }

    def snapshot(self, version: int, assignments: Mapping[str, Mapping[str, str]]) -> None:
        self.table = {str(c): str(b) for c, b in assignments.get(self.platform, {}).items()}
        self.version = version
        self.connected = True
        self.snapshots += 1
        self.pins_unsupported = False  # maybe another (upgraded) service

    def apply(self, version: int, platform: str, changes: Mapping[str, str | None]) -> bool:
        """Applies a ``changes`` event; ``False`` when its version does not follow."""
        if self.version is None or version != self.version + 1:
            return False
        self.version = version
        if platform == self.platform:
            for channel, bot in changes.items():
                if bot is None:
                    self.table.pop(str(channel), None)
                else:
                    self.table[str(channel)] = str(bot)
        return True

    def presence(self, platform: str, bot: str, online: bool) -> None:
        """Applies a ``presence`` event: ``bot`` went online or offline. An assignee known to
        be offline no longer answers its groups: they are claimed (rule 5) until the stream
        names their new assignee."""
        if platform != self.platform:
            return
        self.presences += 1
        self.heard[bot] = (self.presences, online)
        if self.fleet is None:
            self.fleet = {}
        self.fleet[bot] = online

    def set_fleet(self, bots: list[dict[str, object]], since: int | None = None) -> None:
        """Applies a read of ``GET /v1/bots`` that started after presence event ``since``
        (``presences`` then): the events after it are newer than the read and stay."""
        fleet = {
            str(b["bot"]): bool(b.get("online"))
            for b in bots
            if b.get("platform") == self.platform
        }
        if since is not None:
            self.heard = {b: h for b, h in self.heard.items() if h[0] > since}
            for bot, (_, online) in self.heard.items():
                fleet[bot] = online
        self.fleet = fleet

    def is_fleet_bot(self, bot: str, local: Mapping[str, object]) -> bool:
        """A bot of the fleet: connected here, or known to the service (online or not)."""
        return (
            bot in local
            or (self.fleet is not None and bot in self.fleet)
            or bot in self.ours
        )
