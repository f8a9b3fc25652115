"""Session groups: the G external-agent sessions on one task that GRPO compares.

A session joins a group when it opens (``GroupBook.join``) and hands its episode over
when it closes (``GroupBook.finish``). A group is named by the agent's ``group_id`` or by
its task key (``env_id``, ``env_kwargs``, ``seed``, ``group_size``), and the name belongs
to the agent key that opened it: the same name from another key is another group, so no
key can join, fill or squat another key's group (a squatter's members would otherwise wait
in it for the timeout, and its episodes would be compared with another agent's). A group
admits members until it has ``size`` of them, then the name is free again (the next
session with it opens a new group). Members must agree on the task: one that does not gets
a 409. A lone session (no group named) is a group of one under its session id.

A group settles when all ``size`` members have closed, or, past its deadline
(``group_timeout_s`` after its first member opened; lone sessions have none), once the
members still open have been closed. Settling splits its episodes the way the rollout
runner does (``GroupFilter``, zero-variance groups kept)::

    valid >= min(2, size)  -> one TrajectoryGroup of the valid episodes ("kept")
    otherwise              -> every episode set aside as invalid     ("set_aside")

The book holds no I/O: ``SessionManager`` persists what a settlement says.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import uuid
from collections.abc import Hashable
from typing import Literal

from rollgym.contract.wire import SessionCreate, Trajectory, TrajectoryGroup
from rollgym.server.errors import Conflict
from rollgym.server.rollout.filtering import GroupFilter, Verdict

_SEEDS = 2**31  # seeds the server draws for a group that names none


@dataclasses.dataclass
class SessionGroup:
    """One group's members and finished episodes."""

    id: str  # the server's: the persisted TrajectoryGroup's id
    size: int
    env_id: str
    env_kwargs: dict[str, object]
    seed: int | None
    deadline: float | None
    key: Hashable | None = None  # what names it (the agent's id or the task key)
    open: set[str] = dataclasses.field(default_factory=set)  # session ids not yet closed
    joined: int = 0
    episodes: list[Trajectory] = dataclasses.field(default_factory=list)
    expired: bool = False  # past its deadline: it settles once its open members close

    @property
    def pending(self) -> int:
        """Members still to close, or still to open."""
        return 0 if self.expired and not self.open else self.size - self.joined + len(self.open)


@dataclasses.dataclass(frozen=True)
class Settlement:
    """What to persist of a settled group."""

    group: SessionGroup
    kept: TrajectoryGroup | None  # the valid episodes, when enough
    invalid: list[Trajectory]  # episodes to keep aside (infrastructure failures)
    set_aside: list[Trajectory]  # valid episodes of a group with too few: now marked invalid

    @property
    def outcome(self) -> Literal["kept", "set_aside"]:
        return "kept" if self.kept is not None else "set_aside"


class GroupBook:
    """The open groups; see the module docstring."""

    def __init__(self, group_timeout_s: float):
        self._timeout_s = group_timeout_s
        self._groups: dict[str, SessionGroup] = {}  # by server id, until settled
        self._named: dict[Hashable, SessionGroup] = {}  # groups admitting members, by name
        self._of: dict[str, SessionGroup] = {}  # session id -> its group

    def __len__(self) -> int:
        """Groups not yet settled (each takes one group of the window's budget)."""
        return len(self._groups)

    def opens_group(self, request: SessionCreate, agent: str) -> bool:
        """Whether a session made from ``request`` by ``agent`` would open a new group."""
        name = group_name(request, agent)
        return name is None or name not in self._named

    def join(self, request: SessionCreate, agent: str, session_id: str, now: float) -> SessionGroup:
        """Put ``agent``'s new session in its group (made here if new); ``Conflict`` on a
        mismatch."""
        name = group_name(request, agent)
        group = self._named.get(name) if name is not None else None
        if group is None:
            group = self._open(request, session_id, name, now)
        else:
            _check_task(group, request)
        group.open.add(session_id)
        group.joined += 1
        if group.joined == group.size and group.key is not None:
            self._named.pop(group.key, None)
        self._of[session_id] = group
        return group

    def leave(self, session_id: str) -> None:
        """Undo ``join`` for a session that never started (its env failed to reset)."""
        group = self._of.pop(session_id)
        group.open.discard(session_id)
        group.joined -= 1
        if group.joined == 0 and not group.episodes:
            del self._groups[group.id]
            if group.key is not None and self._named.get(group.key) is group:
                del self._named[group.key]
        elif group.key is not None and not group.expired:  # a place opened again
            self._named.setdefault(group.key, group)

    def finish(self, session_id: str, episode: Trajectory | None) -> Settlement | None:
        """A member closed with ``episode`` (None: no model turn); the settlement if due."""
        group = self._of.pop(session_id)
        group.open.discard(session_id)
        if episode is not None:
            group.episodes.append(episode)
        return self._settle(group) if group.pending == 0 else None

    def overdue(self, now: float) -> list[SessionGroup]:
        """Groups past their deadline, now expired: they admit no one and settle once their
        open members close. Groups with no open member settle in ``settle_expired``."""
        late = [g for g in self._groups.values() if g.deadline is not None and g.deadline < now]
        for group in late:
            group.expired = True
            if group.key is not None and self._named.get(group.key) is group:
                del self._named[group.key]
        return late

    def settle_expired(self, group: SessionGroup) -> Settlement | None:
        """Settle an expired group with no open member (None if already settled)."""
        if group.id not in self._groups or group.open:
            return None
        return self._settle(group)

    def _open(
        self, request: SessionCreate, session_id: str, name: Hashable | None, now: float
    ) -> SessionGroup:
        size = request.group_size or 1
        seed = request.seed
        if seed is None and size > 1:  # every member plays the same task
            seed = secrets.randbelow(_SEEDS)
        group = SessionGroup(
            id=session_id if size == 1 else uuid.uuid4().hex,
            size=size,
            env_id=request.env_id,
            env_kwargs=dict(request.env_kwargs),
            seed=seed,
            deadline=now + self._timeout_s if size > 1 else None,
            key=name,
        )
        self._groups[group.id] = group
        if name is not None:
            self._named[name] = group
        return group

    def _settle(self, group: SessionGroup) -> Settlement:
        del self._groups[group.id]
        keep = GroupFilter(group.size, drop_zero_variance=False)
        valid, invalid = keep.split(group.episodes)
        if keep.verdict([t.reward for t in valid]) is Verdict.KEEP:
            kept = TrajectoryGroup(
                group_id=group.id, env_id=group.env_id, task_seed=group.seed, trajectories=valid
            )
            return Settlement(group, kept, invalid, [])
        reason = (
            f"its group of {group.size} sessions settled with {len(valid)} valid episode(s); "
            "GRPO compares at least 2"
        )
        aside = [t.model_copy(update={"valid": False, "invalid_reason": reason}) for t in valid]
        return Settlement(group, None, invalid, aside)


def group_name(request: SessionCreate, owner: str) -> Hashable | None:
    """What names the request's group: its ``owner`` (the key that sends it) with the
    agent's id, else with the task key (None: a lone session).

    The server's ``owner`` is the agent key's name; the cluster router, which does not read
    keys, keys its placement by a digest of the caller's credential, so that a group's
    members meet on one server: one rule for both."""
    if request.group_size is None:
        return None
    if request.group_id is not None:
        return ("id", owner, request.group_id)
    kwargs = json.dumps(request.env_kwargs, sort_keys=True)
    return ("task", owner, request.env_id, kwargs, request.seed, request.group_size)


def _check_task(group: SessionGroup, request: SessionCreate) -> None:
    """A member must play its group's task (``Conflict`` names the first difference)."""
    theirs: dict[str, object] = {
        "group_size": request.group_size,
        "env_id": request.env_id,
        "env_kwargs": dict(request.env_kwargs),
    }
    ours: dict[str, object] = {
        "group_size": group.size,
        "env_id": group.env_id,
        "env_kwargs": group.env_kwargs,
    }
    if request.seed is not None:
        theirs["seed"], ours["seed"] = request.seed, group.seed
    for field, value in theirs.items():
        if value != ours[field]:
            raise Conflict(
                f"group {group.id} plays {field}={ours[field]!r}; this session asks for "
                f"{value!r}: a group's sessions play one task"
            )
