"""Pinning a process to cores: every thread it has now, and so every one it starts later.

Linux keeps a CPU mask per thread (``sched_setaffinity(0, ...)`` sets only the caller's), and
a new thread or child takes its creator's. ``pin_process`` sets the mask of each thread of a
process: of this one (the trainer: torch's OpenMP workers included) or of a child just
started (the server, before it starts its engine), so the whole tree stays on its cores.
"""

from __future__ import annotations

import os
from collections.abc import Iterable


def pin_process(cores: Iterable[int], pid: int | None = None) -> None:
    """Put every thread of ``pid`` (default: this process) on ``cores``."""
    allowed = set(cores)
    task_dir = f"/proc/{pid or os.getpid()}/task"
    for tid in os.listdir(task_dir):
        try:
            os.sched_setaffinity(int(tid), allowed)
        except ProcessLookupError:  # a thread that ended meanwhile
            continue


def allowed_cores() -> set[int]:
    """The cores the calling thread may run on."""
    return os.sched_getaffinity(0)
