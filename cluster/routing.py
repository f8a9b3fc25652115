"""The router's rules, as small pure functions and one table: where each request goes.

* **Sticky sessions.** A session lives on the server that created it (its episode, its
  transcript and its KV/prefix cache are there), so every later call of the session goes
  to that server. When that server dies, the session is gone with it: its calls get a
  clear ``server_lost`` error, never a silent hop to another server that does not know it.
  The router forgets a session when its server closed it, or when its server says it does
  not know it to the caller that made it (``caller_of``): another key's 404 (the server
  hides other keys' sessions) never makes the router forget the owner's session.
* **Groups on one server.** The G sessions of a session group (named by the agent's
  ``group_id`` or by its task key, and by the caller: a name belongs to the key that
  opened it, as on the server) go where its first member went: the server assembles
  the group, so members elsewhere would each open a group that never fills. The router
  remembers the group until G members came, then forgets it (the name is free again, as
  on the server). If that server dies, the group cannot fill: its later members get
  ``server_lost`` until G have come.
* **Least-loaded new work.** A new session, or an OpenAI call without a session, goes to
  the server in rotation with the least load (open sessions + calls in flight through the
  router + episodes its rollout job is running); ties go round, so equal servers take
  turns. (Peers moved from consistent hashing to this "sticky least-loaded" shape after
  hashing pinned sessions to a saturated engine.)
* **One admission budget.** A rollout job's budget of groups per batch is split over the
  servers (``split_budget``) so that the staleness window's capacity,
  ``(max_staleness + 1) x groups_per_batch``, holds for the whole cluster, not per server.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import hashlib
from collections.abc import Hashable, Mapping, Sequence


def least_loaded(loads: Mapping[str, int], turn: int = 0) -> str | None:
    """The server with the least load; among equals, the ``turn``-th (round robin).

    >>> least_loaded({"s0": 3, "s1": 1, "s2": 1}, turn=0), least_loaded({"s0": 3, "s1": 1, "s2": 1}, 1)
    ('s1', 's2')
    >>> least_loaded({}) is None
    True
    """
    if not loads:
        return None
    lowest = min(loads.values())
    tied = sorted(name for name, load in loads.items() if load == lowest)
    return tied[turn % len(tied)]


def split_budget(total: int, servers: Sequence[str]) -> dict[str, int]:
    """Split ``total`` groups per batch over ``servers``: shares differ by at most one and
    sum to ``total``; a server whose share is 0 runs no rollout job.

    >>> split_budget(8, ["s0", "s1"]), split_budget(5, ["s0", "s1"]), split_budget(1, ["s0", "s1"])
    ({'s0': 4, 's1': 4}, {'s0': 3, 's1': 2}, {'s0': 1, 's1': 0})
    """
    if total < 1 or not servers:
        raise ValueError(f"need a budget >= 1 and servers, got {total} and {list(servers)}")
    base, extra = divmod(total, len(servers))
    return {name: base + (1 if i < extra else 0) for i, name in enumerate(servers)}


def split_seeds(
    seeds: Sequence[int] | None, shares: Mapping[str, int]
) -> dict[str, list[int] | None]:
    """Deal a job's task seeds out to the servers that run it, so no task runs twice at
    once; with fewer seeds than servers, or none given, every server gets them all.

    >>> split_seeds([0, 1, 2, 3, 4], {"s0": 2, "s1": 2, "s2": 0})
    {'s0': [0, 2, 4], 's1': [1, 3], 's2': None}
    """
    running = [name for name, share in shares.items() if share > 0]
    out: dict[str, list[int] | None] = dict.fromkeys(shares)
    for i, name in enumerate(running):
        if seeds is None or len(seeds) < len(running):
            out[name] = None if seeds is None else list(seeds)
        else:
            out[name] = list(seeds[i :: len(running)])
    return out


def caller_of(authorization: str | None) -> str:
    """Who sends a call, as far as the router can tell without reading keys: a digest of its
    ``Authorization`` header ("" without one). One key, one caller; the digest stays here.

    >>> caller_of("Bearer k") == caller_of("Bearer k") != caller_of("Bearer j"), caller_of(None)
    (True, '')
    """
    if not authorization:
        return ""
    return hashlib.sha256(authorization.encode("utf-8", "surrogateescape")).hexdigest()


class Owner(enum.Enum):
    """What the table knows of a session's server."""

    SERVING = "serving"
    LOST = "lost"  # the server died after the session was made there


@dataclasses.dataclass(frozen=True)
class SessionPlace:
    server: str
    owner: Owner
    caller: str = ""  # ``caller_of`` the call that made it


class SessionTable:
    """Which server holds which session (see the module docstring).

    >>> table = SessionTable()
    >>> table.bind("a", "s0"); table.bind("b", "s1"); table.lose("s0")
    1
    >>> table.find("a").owner, table.find("b").owner, table.find("zzz")
    (<Owner.LOST: 'lost'>, <Owner.SERVING: 'serving'>, None)
    >>> table.open_on("s1"), table.open_on("s0")
    (1, 0)
    """

    def __init__(self, max_lost: int = 100_000):
        self._places: dict[str, SessionPlace] = {}
        self._open: collections.Counter[str] = collections.Counter()
        self._max_lost = max_lost

    def bind(self, session_id: str, server: str, caller: str = "") -> None:
        self.drop(session_id)
        self._places[session_id] = SessionPlace(server, Owner.SERVING, caller)
        self._open[server] += 1

    def find(self, session_id: str) -> SessionPlace | None:
        return self._places.get(session_id)

    def drop(self, session_id: str) -> None:
        place = self._places.pop(session_id, None)
        if place is not None and place.owner is Owner.SERVING:
            self._open[place.server] -= 1

    def lose(self, server: str) -> int:
        """Mark every session of ``server`` lost (it died); returns how many."""
        lost = [
            sid
            for sid, p in self._places.items()
            if p.server == server and p.owner is Owner.SERVING
        ]
        for sid in lost:
            self._places[sid] = dataclasses.replace(self._places[sid], owner=Owner.LOST)
        self._open[server] = 0
        self._forget_oldest_lost()
        return len(lost)

    def open_on(self, server: str) -> int:
        return self._open[server]

    def _forget_oldest_lost(self) -> None:
        """Lost sessions are kept only to answer their calls clearly; bound how many."""
        lost = [sid for sid, p in self._places.items() if p.owner is Owner.LOST]
        for sid in lost[: max(len(lost) - self._max_lost, 0)]:
            del self._places[sid]


@dataclasses.dataclass
class GroupPlace:
    """Where a session group still filling lives, and how many of its members came."""

    server: str
    size: int
    came: int = 0  # members created there, or turned away because the server was lost
    owner: Owner = Owner.SERVING


class GroupTable:
    """Which server assembles each session group still filling (see the module docstring).

    >>> table = GroupTable()
    >>> table.reserve("g", "s1", size=2); table.arrived("g"); table.find("g").server
    's1'
    >>> table.arrived("g"); table.find("g") is None  # all 2 came: forgotten
    True
    >>> table.reserve("h", "s0", size=3); table.reserve("k", "s0", size=2); table.arrived("h")
    >>> table.lose("s0"), table.find("h").owner, table.find("k")  # k had no member there yet
    (1, <Owner.LOST: 'lost'>, None)
    """

    def __init__(self, max_groups: int = 100_000):
        self._places: dict[Hashable, GroupPlace] = {}
        self._max_groups = max_groups

    def find(self, name: Hashable) -> GroupPlace | None:
        return self._places.get(name)

    def reserve(self, name: Hashable, server: str, size: int) -> None:
        """Send the group's members to ``server`` (where its first member goes)."""
        self._places[name] = GroupPlace(server, size)
        if len(self._places) > self._max_groups:  # groups never filled: bound the memory
            del self._places[next(iter(self._places))]

    def arrived(self, name: Hashable) -> None:
        """One more member came; once all ``size`` have, the group is forgotten."""
        place = self._places.get(name)
        if place is None:
            return
        place.came += 1
        if place.came >= place.size:
            del self._places[name]

    def lose(self, server: str) -> int:
        """``server`` died: its groups with members are lost (returns how many); groups
        that had none there yet are forgotten, so their first member goes elsewhere."""
        lost = 0
        for name, place in list(self._places.items()):
            if place.server != server or place.owner is Owner.LOST:
                continue
            if place.came == 0:
                del self._places[name]
            else:
                place.owner = Owner.LOST
                lost += 1
        return lost
