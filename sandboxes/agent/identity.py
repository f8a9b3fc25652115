"""Who runs what in a box: the trusted executor, the agent, the verifier and the host.

In a Docker box the executor runs as root with only the capabilities it needs to be the
trusted side (SETUID, SETGID, KILL); everything untrusted runs under other uids:

- **agent** processes (shell commands, the Python worker) run as the agent's uid with no
  capabilities, so they cannot signal, ptrace or read the memory of the executor, and the
  kernel's OOM killer takes them first (``oom_score_adj`` 1000);
- **verifier** processes (a task's checks) run as a third uid in the agent's group: they
  read the agent's files as any other member of its group would, and agent processes
  cannot touch them either;
- files the executor reads and writes *for the host* are opened with the agent's
  file-system identity (``setfsuid``), so a symlink the agent planted never reaches
  further than the agent itself could; the executor's own sockets are made with the
  host's identity, in a folder only the host can enter.

The fake sandbox runs the executor as a plain host process: ``Identities.none()``, where
every role is the executor's own user and nothing is switched.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
from collections.abc import Callable, Iterator

AGENT_OOM_SCORE_ADJ = "1000"  # the OOM killer's first choice: agent processes, never ours

_libc = ctypes.CDLL(None, use_errno=True)


@dataclasses.dataclass(frozen=True)
class User:
    uid: int
    gid: int

    @classmethod
    def parse(cls, text: str) -> User:
        """``"uid:gid"`` as the executor's command line gives it."""
        uid, _, gid = text.partition(":")
        return cls(int(uid), int(gid or uid))

    def __str__(self) -> str:
        return f"{self.uid}:{self.gid}"


@dataclasses.dataclass(frozen=True)
class Identities:
    """The roles' users; ``None`` everywhere when nothing is switched (the fake)."""

    agent: User | None = None
    verifier: User | None = None
    host: User | None = None

    @classmethod
    def none(cls) -> Identities:
        return cls()

    @property
    def switching(self) -> bool:
        return self.agent is not None

    def agent_process(self) -> Callable[[], None] | None:
        """A ``preexec_fn`` that turns a fresh child into an agent process."""
        return None if self.agent is None else _become(self.agent, AGENT_OOM_SCORE_ADJ)

    def verifier_process(self) -> Callable[[], None] | None:
        """A ``preexec_fn`` that turns a fresh child into a verifier process."""
        return None if self.verifier is None else _become(self.verifier, None)

    def as_agent_files(self) -> contextlib.AbstractContextManager[None]:
        """File calls made for the host see the box as the agent does."""
        return files_as(self.agent)

    def as_host_files(self) -> contextlib.AbstractContextManager[None]:
        """The executor's sockets belong to the host, in the host's own folder."""
        return files_as(self.host)


def _become(user: User, oom_score_adj: str | None) -> Callable[[], None]:
    def preexec() -> None:
        if oom_score_adj is not None:  # raising it needs no privilege; do it while we can
            with open("/proc/self/oom_score_adj", "w") as handle:
                handle.write(oom_score_adj)
        os.setgroups([])
        os.setgid(user.gid)
        os.setuid(user.uid)  # real, effective and saved: there is no way back

    return preexec


def become(user: User | None, oom_score_adj: str | None = AGENT_OOM_SCORE_ADJ) -> None:
    """Turn the calling (forked) process into ``user`` for good; no-op for ``None``."""
    if user is not None:
        _become(user, oom_score_adj)()


@contextlib.contextmanager
def files_as(user: User | None) -> Iterator[None]:
    """Use ``user``'s file-system identity (``setfsuid``/``setfsgid``) for the block.

    Only file permission checks change: signals, ptrace and everything else stay the
    executor's. The executor serves one request at a time on one thread, so switching
    the thread's identity around a call is safe. No-op for ``None``.
    """
    if user is None:
        yield
        return
    _set_fs_identity(user.uid, user.gid)
    try:
        yield
    finally:
        _set_fs_identity(os.geteuid(), os.getegid())


def _set_fs_identity(uid: int, gid: int) -> None:
    # Both calls return the previous id and never fail loudly: check that they took.
    _libc.setfsgid(gid)
    _libc.setfsuid(uid)
    if _libc.setfsuid(-1) != uid or _libc.setfsgid(-1) != gid:
        raise PermissionError(f"cannot take the file-system identity {uid}:{gid}")


@contextlib.contextmanager
def effective_user(uid: int | None) -> Iterator[None]:
    """Act as ``uid`` for the block (SysV IPC checks the effective uid, not the fs one)."""
    if uid is None:
        yield
        return
    os.seteuid(uid)
    try:
        yield
    finally:
        os.seteuid(0)  # the saved uid is still root: capabilities come back with it
