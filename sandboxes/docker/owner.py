"""Who owns a box: a process, told apart from a later one that reuses its pid.

Every container and runtime folder carries its owner's pid, start time (clock ticks since
boot, from ``/proc/<pid>/stat``) and host name. A leftover is swept only when its owner is
on this host and gone; owners on other hosts (another container's pid namespace) are
never judged.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from pathlib import Path


def process_start_ticks(pid: int) -> str | None:
    """The process's start time in clock ticks since boot; None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22, counted after the command name, which may itself hold spaces and parens.
    return stat.rsplit(")", 1)[1].split()[19]


@dataclasses.dataclass(frozen=True)
class Owner:
    pid: int
    start: str
    host: str

    @classmethod
    def me(cls) -> Owner:
        pid = os.getpid()
        return cls(pid, process_start_ticks(pid) or "", socket.gethostname())

    def is_gone(self) -> bool:
        """True only when this owner ran on this host and no longer runs."""
        if self.host != socket.gethostname():
            return False
        return process_start_ticks(self.pid) != self.start

    def encode(self) -> str:
        return f"{self.pid} {self.start} {self.host}"

    @classmethod
    def decode(cls, text: str) -> Owner | None:
        parts = text.split()
        if len(parts) != 3 or not parts[0].isdigit():
            return None
        return cls(int(parts[0]), parts[1], parts[2])
