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
        """Every bot the service knows on this platform → online (``GET /v1/bots``);
        ``None`` until read once."""
        self.ours: set[str] = set()
        """Bots that connected to this process. One of them that is not connected now is
        offline, whatever the last read of the fleet says, until the service reports it online
        after it heard of its disconnection here (it then runs elsewhere)."""

    def snapshot(self, version: int, assignments: Mapping[str, Mapping[str, str]]) -> None:
        self.table = {str(c): str(b) for c, b in assignments.get(self.platform, {}).items()}
        self.version = version
        self.connected = True
        self.snapshots += 1

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

    def set_fleet(self, bots: list[dict[str, object]]) -> None:
        self.fleet = {
            str(b["bot"]): bool(b.get("online"))
            for b in bots
            if b.get("platform") == self.platform
        }

    def is_fleet_bot(self, bot: str, local: Mapping[str, object]) -> bool:
        """A bot of the fleet: connected here, or known to the service (online or not)."""
        return (
            bot in local
            or (self.fleet is not None and bot in self.fleet)
            or bot in self.ours
        )
