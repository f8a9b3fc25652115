"""Process-group killing and the cgroup's OOM counter: the executor's blunt instruments."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

PROC = "/proc"
REAP_TIMEOUT_S = 1.0
KILLED = 128 + signal.SIGKILL  # what we report for a child we killed but could not reap

# cgroup v2 keeps the counter in memory.events, v1 in memory.oom_control ("oom_kill N").
OOM_COUNTER_FILES = (
    Path("/sys/fs/cgroup/memory.events"),
    Path("/sys/fs/cgroup/memory/memory.oom_control"),
)


def exit_code_of(returncode: int) -> int:
    """Popen's ``-N`` (killed by signal N) as a shell reports it: ``128 + N``."""
    return 128 - returncode if returncode < 0 else returncode


def kill_group(pgid: int, *, rounds: int = 3) -> None:
    """SIGKILL a whole process group; repeated, so a member forked mid-kill dies too."""
    for _ in range(rounds):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.0005)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap(pid: int, timeout_s: float = REAP_TIMEOUT_S) -> int | None:
    """Wait at most ``timeout_s`` for child ``pid`` to be reapable; its wait status, or None.

    Never wait without a bound on a process agent code may hold: a child that another
    agent process ptrace-attached cannot be reaped until its tracer lets go, and an
    executor that waited for it would hang. ``reap_children`` collects it later.
    """
    end = time.monotonic() + timeout_s
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere already
            return None
        if done:
            return status
        if time.monotonic() > end:
            return None
        time.sleep(0.0005)


def reap_children() -> None:
    """Collect exited children so that they stop counting as processes."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def processes_of(*uids: int) -> Iterator[tuple[int, str]]:
    """(pid, state letter) of every process whose real uid is one of ``uids``.

    The real uid, from /proc/<pid>/status: a process cannot change it, while the owner
    of /proc/<pid> becomes root when it makes itself non-dumpable.
    """
    for name in os.listdir(PROC):
        if not name.isdigit():
            continue
        try:
            with open(f"{PROC}/{name}/status") as handle:
                status = handle.read()
        except OSError:  # gone meanwhile
            continue
        uid_at = status.index("\nUid:\t") + 6
        if int(status[uid_at : status.index("\t", uid_at)]) in uids:
            yield int(name), status[status.index("\nState:\t") + 8]


def kill_users(*uids: int, deadline_s: float = 5.0) -> None:
    """SIGKILL every process of ``uids``, whatever session or group it hid in, until none
    is left (zombies count until their parent, ours or the init, reaps them)."""
    end = time.monotonic() + deadline_s
    while alive := [pid for pid, state in processes_of(*uids) if state not in "ZX"]:
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        reap_children()
        if time.monotonic() > end:
            raise TimeoutError(f"processes of uids {uids} still alive after {deadline_s} s")
        time.sleep(0.0005)


def oom_kill_count() -> int | None:
    """How many processes the kernel's OOM killer took in this cgroup; None if unknown."""
    for path in OOM_COUNTER_FILES:
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    return None
