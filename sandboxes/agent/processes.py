"""Process-group killing and the cgroup's OOM counter: the executor's blunt instruments."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

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


def reap_children() -> None:
    """Collect exited children so that they stop counting as processes."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_everything_else(deadline_s: float = 5.0) -> None:
    """SIGKILL every process this user may signal except PID 1 (the init) and ourselves.

    Only ever called inside a container (the executor checks), where that means every
    process an agent started, whatever session or group it hid in. Loops until nothing is
    left to signal: zombies count until their parent (ours, or the init) reaps them.
    """
    end = time.monotonic() + deadline_s
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            return
        reap_children()
        if time.monotonic() > end:
            raise TimeoutError(f"processes still alive after {deadline_s} s of SIGKILL")
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
