"""The trajectory buffer: durable, versioned, each group handed out once.

SQLite in WAL mode with ``synchronous=FULL``: ``put_group`` returns only after its commit
is on disk, so a group the runner counted (or an HTTP call acknowledged) survives a crash.
Group ids are unique, so a retried put never duplicates.

A group's life::

    ready --pull--> leased --ack--> acked (payload archived; the id stays, so no duplicate)
      ^               |
      +-- lease timeout (not acked in time: handed out again)
    ready/leased --pull finds trainer_version - min_version > max_staleness--> stale (counted,
                                                                            payload archived)

(With the pull's ``staleness_unit="turn"`` the rule reads ``max_version``, the group's newest
turn: ``rollgym.contract.staleness.window_version``.)

Groups that leave the queue go to the archive (``server.buffer.archive``) in the same
transaction, kept as long as ``BufferConfig.archive_retention_s`` says, for ``rollgym export``.
The buffer tells its observers (``server.buffer.observers``) of every group it stores, every
invalid trajectory it sets aside and every pull; it remembers the version of the trainer's
last pull (``trainer_version``).

``pull`` is a long-poll: it answers once ``num_groups`` groups are ready (then leases them
together under one ``lease_id``) or when ``timeout_s`` runs out (with what is ready). All
SQLite work runs on one worker thread that owns the connection; the event loop never
blocks on disk. A stored group that no longer reads as a ``TrajectoryGroup`` (a payload
from an older schema, a bad disk) is dropped and logged when a pull reaches it: it never
blocks the groups behind it. (Nothing non-finite can be stored: a ``Trajectory`` cannot
hold a NaN.)
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import sqlite3
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from pydantic import ValidationError

from rollgym.contract.archive import ArchiveKind, ArchivePage, Outcome
from rollgym.contract.staleness import StalenessUnit, oldest_fresh_version, window_version
from rollgym.contract.wire import ErrorCode, PullRequest, PullResponse, Trajectory, TrajectoryGroup
from rollgym.server.buffer import archive
from rollgym.server.buffer.observers import BufferObserver
from rollgym.server.config import BufferConfig
from rollgym.server.errors import ServerError

logger = logging.getLogger(__name__)
T = TypeVar("T")
Clock = Callable[[], float]
_POLL_S = 1.0  # re-check leases at least this often while a pull waits

_SCHEMA = """
CREATE TABLE IF NOT EXISTS groups (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    group_id TEXT NOT NULL UNIQUE,
    min_version INTEGER NOT NULL,
    max_version INTEGER,
    size INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('ready', 'leased', 'acked', 'stale')),
    lease_id TEXT,
    lease_expires REAL,
    created_at REAL NOT NULL,
    payload BLOB
);
CREATE INDEX IF NOT EXISTS groups_by_state ON groups (state, seq);
CREATE TABLE IF NOT EXISTS invalid (
    trajectory_id TEXT PRIMARY KEY,
    reason TEXT,
    created_at REAL NOT NULL,
    payload BLOB NOT NULL
);
"""


class BufferClosed(ServerError):
    status = 503
    code = ErrorCode.BUFFER_CLOSED


@dataclasses.dataclass(frozen=True)
class BufferDepth:
    """Groups waiting for the trainer: ``ready`` to pull, ``leased`` and not yet acked."""

    ready: int = 0
    leased: int = 0

    @property
    def total(self) -> int:
        return self.ready + self.leased


@dataclasses.dataclass(frozen=True)
class Leased:
    lease_id: str
    groups: list[TrajectoryGroup]
    waited_s: list[float]  # per group: time from put to this lease
    payloads: list[bytes]  # per group: its JSON as stored (``answer_bytes`` splices them)

    def answer_bytes(self, response: PullResponse) -> bytes:
        """``response`` as JSON, its groups spliced in from the stored payloads: nothing is
        serialized again (a big pull re-serialized holds the GIL, and the event loop, for
        long; this is a join). CPU work: call it off the loop."""
        head = response.model_dump_json(exclude={"groups"}).encode()
        return head[:-1] + b',"groups":[' + b",".join(self.payloads) + b"]}"


class TrajectoryBuffer:
    """See the module docstring. Use ``async with TrajectoryBuffer(path, config):``."""

    def __init__(
        self,
        path: Path,
        config: BufferConfig,
        *,
        observers: Sequence[BufferObserver] = (),
        clock: Clock = time.time,
    ):
        self.path = path
        self.config = config
        self._observers = observers
        self._clock = clock
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="trajectory-buffer")
        self._db: sqlite3.Connection | None = None
        self._closed = False
        self._changed = asyncio.Condition()
        self.depth = BufferDepth()
        self.dropped_stale = 0  # trajectories, since this process started
        self.trainer_version: int | None = None  # of the last pull

    # --- life -----------------------------------------------------------------------------

    async def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        await self._run(self._open)
        self.depth = await self._run(self._depth)

    async def close(self) -> None:
        if self._db is not None:
            await self._run(self._close)
        self._closed = True
        self._executor.shutdown(wait=True)

    async def __aenter__(self) -> TrajectoryBuffer:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _open(self) -> None:
        db = sqlite3.connect(self.path, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")  # fsync the WAL on every commit
        db.executescript(_SCHEMA)
        columns = {row[1] for row in db.execute("PRAGMA table_info(groups)")}
        if "max_version" not in columns:  # a buffer written before the column existed
            db.execute("ALTER TABLE groups ADD COLUMN max_version INTEGER")
        db.executescript(archive.SCHEMA)
        self._db = db

    def _close(self) -> None:
        assert self._db is not None
        self._db.close()
        self._db = None

    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        if self._closed:
            raise BufferClosed("the trajectory buffer is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn, *args)

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise BufferClosed("the trajectory buffer is closed")
        return self._db

    # --- writes ---------------------------------------------------------------------------

    async def put_group(self, group: TrajectoryGroup) -> bool:
        """Persist a complete group (durable on return); False if its id was already stored."""
        if not group.trajectories:
            raise ValueError(f"group {group.group_id} has no trajectories")
        payload = group.model_dump_json().encode()
        stored = await self._run(self._insert, group, payload)
        await self._refresh()
        if stored:
            for observer in self._observers:
                observer.stored(group)
        return stored

    def _insert(self, group: TrajectoryGroup, payload: bytes) -> bool:
        cursor = self._conn().execute(
            "INSERT OR IGNORE INTO groups"
            " (group_id, min_version, max_version, size, state, created_at, payload)"
            " VALUES (?, ?, ?, ?, 'ready', ?, ?)",
            (
                group.group_id,
                group.min_version,
                group.max_version,
                len(group.trajectories),
                self._clock(),
                payload,
            ),
        )
        return cursor.rowcount == 1

    async def put_invalid(self, trajectory: Trajectory) -> None:
        """Keep an invalid trajectory for inspection; it is never handed to the trainer."""
        payload = trajectory.model_dump_json().encode()
        await self._run(self._insert_invalid, trajectory, payload)
        for observer in self._observers:
            observer.set_aside(trajectory)

    def _insert_invalid(self, trajectory: Trajectory, payload: bytes) -> None:
        self._conn().execute(
            "INSERT OR IGNORE INTO invalid (trajectory_id, reason, created_at, payload)"
            " VALUES (?, ?, ?, ?)",
            (trajectory.id, trajectory.invalid_reason, self._clock(), payload),
        )

    async def ack(self, group_ids: Sequence[str]) -> int:
        """Mark groups trained on. Idempotent: returns how many of ``group_ids`` are acked."""
        acked = await self._run(self._ack, list(dict.fromkeys(group_ids)))
        await self._refresh()
        return acked

    def _ack(self, group_ids: list[str]) -> int:
        if not group_ids:
            return 0
        marks = ",".join("?" * len(group_ids))
        db = self._conn()
        with db:
            db.execute("BEGIN IMMEDIATE")
            where = f"group_id IN ({marks}) AND state IN ('ready', 'leased')"
            self._archive(db, where, group_ids, "trained")
            db.execute(
                "UPDATE groups SET state = 'acked', payload = NULL, lease_id = NULL,"
                f" lease_expires = NULL WHERE group_id IN ({marks})"
                " AND state IN ('ready', 'leased')",
                group_ids,
            )
            row = db.execute(
                f"SELECT COUNT(*) FROM groups WHERE group_id IN ({marks}) AND state = 'acked'",
                group_ids,
            ).fetchone()
        return int(row[0])

    def _archive(
        self, db: sqlite3.Connection, where: str, params: Sequence[object], outcome: Outcome
    ) -> None:
        """Keep the groups leaving the queue (see ``server.buffer.archive``), then apply retention."""
        keep_s = self.config.archive_retention_s
        if keep_s == 0:
            return
        now = self._clock()
        archive.keep_groups(db, where, params, outcome, now)
        if keep_s is not None:
            archive.prune(db, now - keep_s)

    async def read_archive(self, kind: ArchiveKind, after: int, limit: int) -> ArchivePage:
        """A page of the archive (trained and stale groups) or of the invalid trajectories."""
        return await self._run(lambda: archive.read_page(self._conn(), kind, after, limit))

    # --- pull -----------------------------------------------------------------------------

    async def pull(
        self,
        request: PullRequest,
        policy_version: int,
        *,
        abandoned: Callable[[], Awaitable[bool]] | None = None,
    ) -> tuple[PullResponse, Leased]:
        """Long-poll for complete groups inside the window (see the module docstring).

        ``abandoned`` is asked before leasing: a caller that went away gets nothing leased.
        """
        self.trainer_version = request.trainer_version
        deadline = time.monotonic() + request.timeout_s
        dropped = 0
        while True:
            swept, ready = await self._run(
                self._sweep, request.trainer_version, request.max_staleness, request.staleness_unit
            )
            dropped += swept
            left = deadline - time.monotonic()
            if ready >= request.num_groups or left <= 0:
                break
            async with self._changed:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(left, _POLL_S)):
                        await self._changed.wait()
        limit = 0 if abandoned is not None and await abandoned() else request.num_groups
        leased = await self._run(self._lease, limit)
        self.dropped_stale += dropped
        await self._refresh()
        response = PullResponse(
            lease_id=leased.lease_id if leased.groups else None,
            groups=leased.groups,
            dropped_stale=dropped,
            policy_version=policy_version,
        )
        for observer in self._observers:
            observer.pulled(request, response, leased.waited_s)
        return response, leased

    def _sweep(
        self, trainer_version: int, max_staleness: int, unit: StalenessUnit
    ) -> tuple[int, int]:
        """Re-offer expired leases, drop stale groups; return (trajectories dropped, ready)."""
        db = self._conn()
        oldest_kept = oldest_fresh_version(trainer_version, max_staleness)
        version = window_version(unit, "min_version", "COALESCE(max_version, min_version)")
        stale = f"state = 'ready' AND {version} < ?"
        with db:
            db.execute("BEGIN IMMEDIATE")
            db.execute(
                "UPDATE groups SET state = 'ready', lease_id = NULL, lease_expires = NULL"
                " WHERE state = 'leased' AND lease_expires < ?",
                (self._clock(),),
            )
            (dropped,) = db.execute(
                f"SELECT COALESCE(SUM(size), 0) FROM groups WHERE {stale}", (oldest_kept,)
            ).fetchone()
            self._archive(db, stale, [oldest_kept], "stale")
            db.execute(
                f"UPDATE groups SET state = 'stale', payload = NULL WHERE {stale}", (oldest_kept,)
            )
            (ready,) = db.execute("SELECT COUNT(*) FROM groups WHERE state = 'ready'").fetchone()
        return int(dropped), int(ready)

    def _lease(self, limit: int) -> Leased:
        db = self._conn()
        lease_id = uuid.uuid4().hex
        now = self._clock()
        groups, waited, payloads, unreadable = [], [], [], []
        with db:
            db.execute("BEGIN IMMEDIATE")
            rows = db.execute(
                "SELECT seq, created_at, payload FROM groups WHERE state = 'ready'"
                " ORDER BY seq LIMIT ?",
                (limit,),
            ).fetchall()
            leased = []
            for seq, created, payload in rows:
                try:
                    groups.append(TrajectoryGroup.model_validate_json(payload))
                except ValidationError:  # never handed out; it must not block the others
                    unreadable.append((seq,))
                    continue
                leased.append((lease_id, now + self.config.lease_timeout_s, seq))
                waited.append(max(now - created, 0.0))
                payloads.append(payload)
            db.executemany(
                "UPDATE groups SET state = 'leased', lease_id = ?, lease_expires = ? WHERE seq = ?",
                leased,
            )
            db.executemany(
                "UPDATE groups SET state = 'stale', payload = NULL WHERE seq = ?", unreadable
            )
        if unreadable:
            logger.error("%d unreadable groups in the buffer were dropped", len(unreadable))
        return Leased(lease_id, groups, waited, payloads)

    # --- state ----------------------------------------------------------------------------

    def _depth(self) -> BufferDepth:
        counts = dict(
            self._conn()
            .execute(
                "SELECT state, COUNT(*) FROM groups WHERE state IN ('ready', 'leased')"
                " GROUP BY state"
            )
            .fetchall()
        )
        return BufferDepth(ready=counts.get("ready", 0), leased=counts.get("leased", 0))

    async def _refresh(self) -> None:
        self.depth = await self._run(self._depth)
        async with self._changed:
            self._changed.notify_all()

    async def count_invalid(self) -> int:
        return await self._run(self._count_invalid)

    def _count_invalid(self) -> int:
        (count,) = self._conn().execute("SELECT COUNT(*) FROM invalid").fetchone()
        return int(count)
