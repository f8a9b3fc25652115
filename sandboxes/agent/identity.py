"""Who runs what in a box: the trusted executor, the agent, the verifier and the host.

In a Docker box the executor runs as root with only the capabilities it needs to be the
trusted side (SETUID, SETGID, KILL); everything untrusted runs under other uids:

- **agent** processes (shell commands, the Python worker) run as the agent's uid with no
  capabilities, so they cannot signal, ptrace or read the memory of the executor; the
  kernel's OOM killer takes them first (``oom_score_adj`` 1000, which they may lower
  again: when it takes the executor anyway, the box's keeper restarts it and the host
  counts the agent's OOM, see ``executor``);
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
from collections.abc import Iterator
from typing import Any

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

    def agent_process(self) -> dict[str, Any]:
        """``Popen`` keywords that start a child as an agent process (none for the fake).

        The user switch happens in C between fork and exec (no Python runs in the child,
        which is much cheaper than a ``preexec_fn``); ``mark_agent`` then hands the new
        process to the OOM killer first.
        """
        return _popen_user(self.agent)

    def verifier_process(self) -> dict[str, Any]:
        """``Popen`` keywords that start a child as a verifier process (none for the fake)."""
        return _popen_user(self.verifier)

    def mark_agent(self, pid: int) -> None:
        """Make ``pid`` the OOM killer's first choice (best effort: it may lower it again,
        and without CAP_SYS_RESOURCE nobody can stop that; the box's keeper and the host's
        OOM accounting handle an executor the OOM killer took anyway)."""
        if self.agent is None:
            return
        path = f"/proc/{pid}/oom_score_adj"
        with files_as(self.agent), contextlib.suppress(OSError), open(path, "w") as handle:
            handle.write(AGENT_OOM_SCORE_ADJ)  # OSError: it is gone already

    def as_agent_files(self) -> contextlib.AbstractContextManager[None]:
        """File calls made for the host see the box as the agent does."""
        return files_as(self.agent)

    def as_verifier_files(self) -> contextlib.AbstractContextManager[None]:
        """File calls of a grading: the verifier's folders, as the verifier."""
        return files_as(self.verifier)

    def as_host_files(self) -> contextlib.AbstractContextManager[None]:
        """The executor's sockets belong to the host, in the host's own folder."""
        return files_as(self.host)


def _popen_user(user: User | None) -> dict[str, Any]:
    if user is None:
        return {}
    return {"user": user.uid, "group": user.gid, "extra_groups": []}


def become(user: User | None) -> None:
    """Turn the calling (forked) process into ``user`` for good; no-op for ``None``.

    Its OOM score goes up first, while it still may (raising needs no privilege).
    """
    if user is None:
        return
    with open("/proc/self/oom_score_adj", "w") as handle:
        handle.write(AGENT_OOM_SCORE_ADJ)
    os.setgroups([])
    os.setgid(user.gid)
    os.setuid(user.uid)  # real, effective and saved: there is no way back


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
