"""The servers as the router sees them: each slot's state, load and sessions, and the pick.

A slot is one server position (``s0``, ``s1``...): Ray may replace its process, the slot
stays. Only a ``serving`` slot is *in rotation* (gets new work and its calls)::

    starting --healthy, caught up--> serving --fails a check or an update--> recovering
                                        ^                                        |
                                        +------ restarted, re-synced, caught up -+
    recovering --Ray gave up (max_restarts) or it cannot catch up--> failed
    serving --cluster scale removes it--> draining --drained or timed out--> (gone)

A ``draining`` slot takes no new work but still serves its open sessions, its buffer's
pulls and its acks (``reachable``); the last slots are the ones removed, so the names stay
``s0``...``s<N-1>``. Acks for a removed slot's leases are kept (``retired_acks``) for the
day a slot of that name comes back and reopens its buffer.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools

from rollgym.cluster.errors import NoServer, ServerLost
from rollgym.cluster.routing import GroupTable, SessionTable, least_loaded
from rollgym.cluster.servers import ServerAPI


class SlotState(enum.StrEnum):
    STARTING = "starting"
    SERVING = "serving"
    RECOVERING = "recovering"
    FAILED = "failed"
    DRAINING = "draining"


@dataclasses.dataclass
class Slot:
    index: int
    api: ServerAPI | None = None
    state: SlotState = SlotState.STARTING
    pid: int | None = None
    node: str | None = None  # the Ray node its process runs on
    version: int | None = None
    restarts: int = 0
    reason: str | None = None  # why it is not serving
    in_flight: int = 0  # calls the router forwarded and that have not answered yet
    episodes: int = 0  # its rollout job's episodes in flight (last check)
    pending_acks: set[str] = dataclasses.field(default_factory=set)

    @property
    def name(self) -> str:
        return f"s{self.index}"

    @property
    def serving(self) -> bool:
        return self.state is SlotState.SERVING and self.api is not None

    @property
    def reachable(self) -> bool:
        """Serving, or draining: its sessions, pulls and acks still go to it."""
        return self.state in (SlotState.SERVING, SlotState.DRAINING) and self.api is not None


class Fleet:
    """The slots, the session and group tables, and the least-loaded pick over the rotation."""

    def __init__(self, size: int):
        self.slots = [Slot(i) for i in range(size)]
        self.sessions = SessionTable()
        self.groups = GroupTable()
        self.retired_acks: dict[str, set[str]] = {}
        self._turns = itertools.count()

    def by_name(self, name: str) -> Slot:
        """The slot of that name; ``ServerLost`` once ``cluster scale`` removed it."""
        index = int(name.removeprefix("s"))
        if index >= len(self.slots):
            raise ServerLost(
                f"server {name} was removed from the cluster (cluster scale): what it held "
                "is gone from here; start a new session"
            )
        return self.slots[index]

    def rotation(self) -> list[Slot]:
        return [s for s in self.slots if s.serving]

    def reachable(self) -> list[Slot]:
        """The rotation and the draining slots: every buffer the trainer may pull from."""
        return [s for s in self.slots if s.reachable]

    def load(self, slot: Slot) -> int:
        return self.sessions.open_on(slot.name) + slot.in_flight + slot.episodes

    def pick(self) -> Slot:
        """The least-loaded slot in rotation (ties take turns); ``NoServer`` if none."""
        loads = {s.name: self.load(s) for s in self.rotation()}
        name = least_loaded(loads, next(self._turns))
        if name is None:
            raise NoServer(
                "no server is in rotation (all are starting or restarting): retry shortly"
            )
        return self.by_name(name)
