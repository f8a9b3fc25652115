"""The buffer's archive: groups kept after they leave the training queue, for export.

A group leaves the queue when a trainer acks it (``trained``) or the staleness window
drops it (``stale``). Before, its payload was dropped then; now it moves into the
``archive`` table of the same SQLite file, in the same transaction, so an archived group
is exactly as durable as a buffered one. ``BufferConfig.archive_retention_s`` says how
long: ``None`` keeps everything (the default), ``0`` keeps nothing (payloads are dropped as
before), ``t`` deletes what was archived more than ``t`` seconds ago.

Invalid trajectories (infrastructure failures) already live in the ``invalid`` table; the
archive reads them too, as groups of one.

The functions here take the buffer's connection and run on the buffer's worker thread
(``TrajectoryBuffer.read_archive``); ``ArchiveFile`` opens a data dir's SQLite file
read-only for export without a server (WAL lets it read while a server writes).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path

from rollgym.contract.archive import ArchivedGroup, ArchiveKind, ArchivePage, Outcome
from rollgym.contract.wire import Trajectory, TrajectoryGroup

SCHEMA = """
CREATE TABLE IF NOT EXISTS archive (
    seq INTEGER PRIMARY KEY,
    group_id TEXT NOT NULL UNIQUE,
    outcome TEXT NOT NULL CHECK (outcome IN ('trained', 'stale')),
    archived_at REAL NOT NULL,
    payload BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS archive_by_time ON archive (archived_at);
"""


def keep_groups(
    db: sqlite3.Connection, where: str, params: Sequence[object], outcome: Outcome, now: float
) -> None:
    """Copy the buffered groups that match ``where`` (on ``groups``) into the archive.

    Called inside the buffer's transaction, just before it drops their payloads.
    """
    db.execute(
        "INSERT OR IGNORE INTO archive (seq, group_id, outcome, archived_at, payload)"
        f" SELECT seq, group_id, ?, ?, payload FROM groups WHERE payload IS NOT NULL AND {where}",
        (outcome, now, *params),
    )


def prune(db: sqlite3.Connection, older_than: float) -> int:
    """Delete what was archived before ``older_than``; returns how many groups."""
    return db.execute("DELETE FROM archive WHERE archived_at < ?", (older_than,)).rowcount


def read_page(db: sqlite3.Connection, kind: ArchiveKind, after: int, limit: int) -> ArchivePage:
    """Up to ``limit`` archived groups (or invalid trajectories) with seq > ``after``."""
    if kind == "groups":
        rows = db.execute(
            "SELECT seq, outcome, archived_at, payload FROM archive WHERE seq > ?"
            " ORDER BY seq LIMIT ?",
            (after, limit),
        ).fetchall()
        items = [
            ArchivedGroup(
                seq=seq,
                outcome=outcome,
                archived_at=at,
                group=TrajectoryGroup.model_validate_json(payload),
            )
            for seq, outcome, at, payload in rows
        ]
    else:
        rows = db.execute(
            "SELECT rowid, created_at, payload FROM invalid WHERE rowid > ? ORDER BY rowid LIMIT ?",
            (after, limit),
        ).fetchall()
        items = [
            ArchivedGroup(seq=seq, outcome="invalid", archived_at=at, group=group_of_one(payload))
            for seq, at, payload in rows
        ]
    next_after = items[-1].seq if len(items) == limit else None
    return ArchivePage(items=items, next_after=next_after)


def group_of_one(payload: bytes | str) -> TrajectoryGroup:
    trajectory = Trajectory.model_validate_json(payload)
    return TrajectoryGroup(
        group_id=trajectory.group_id,
        env_id=trajectory.env_id,
        task_seed=trajectory.task_seed,
        trajectories=[trajectory],
    )


class ArchiveFile:
    """A data dir's buffer file, read-only: ``with ArchiveFile(path) as f: f.pages("groups")``."""

    def __init__(self, path: Path):
        if not path.is_file():
            raise FileNotFoundError(f"no buffer file at {path}")
        self.path = path
        self._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)

    def pages(self, kind: ArchiveKind, *, page_size: int = 500) -> Iterator[ArchivePage]:
        after = 0
        while True:
            page = self.read(kind, after, page_size)
            yield page
            if page.next_after is None:
                return
            after = page.next_after

    def count(self, kind: ArchiveKind) -> int:
        """Archived groups (or invalid trajectories) of ``kind``, for a reader's progress."""
        if kind == "groups" and not self._has_archive():
            return 0
        table = "archive" if kind == "groups" else "invalid"
        return int(self._db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])

    def read(self, kind: ArchiveKind, after: int, limit: int) -> ArchivePage:
        if kind == "groups" and not self._has_archive():
            return ArchivePage(items=[], next_after=None)  # a buffer from before the archive
        return read_page(self._db, kind, after, limit)

    def _has_archive(self) -> bool:
        row = self._db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'archive'"
        ).fetchone()
        return row is not None

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> ArchiveFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
