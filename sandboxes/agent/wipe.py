"""Reset's eraser: remove everything the agent (and the verifier) could have left behind.

In a box that is every writable folder (the work dir, ``/tmp``, ``/dev/shm``,
``/dev/mqueue``): their contents, and the folders' own mode and extended attributes as
they were when the box started (the agent owns its work dir and may have locked it or
hung an ACL on it); and the System V IPC objects (shared memory, semaphores, message
queues) that outlive their processes. ``reset`` calls this after every process but the
executor is dead, so nothing can race it. Each entry is removed with its owner's
file-system identity: a sticky ``/tmp`` lets only a file's owner unlink it, and a
folder the agent locked with ``chmod 000`` opens again for its owner.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import stat
from pathlib import Path

from .identity import User, effective_user, files_as

SYSV_IPC = Path("/proc/sysvipc")
AGENT_XATTRS = ("user.", "system.posix_acl_")  # what a folder's owner may set
IPC_RMID = 0

_libc = ctypes.CDLL(None, use_errno=True)


@dataclasses.dataclass(frozen=True)
class WipedFolder:
    """A folder reset empties, and the mode and owner it must keep."""

    path: str
    mode: int
    owner: User

    @classmethod
    def capture(cls, path: str) -> WipedFolder:
        info = os.stat(path)
        return cls(path, stat.S_IMODE(info.st_mode), User(info.st_uid, info.st_gid))

    def reset(self, *, switching: bool) -> None:
        """Empty it, then give it back its mode and drop any extended attribute."""
        with files_as(self.owner if switching else None):
            os.chmod(self.path, self.mode | stat.S_IRWXU)  # room to work first
        wipe(self.path, switching=switching)
        self.restore(switching=switching)

    def restore(self, *, switching: bool) -> None:
        """Give the folder itself back its mode, without the extended attributes its owner
        hung on it; what is inside stays as it is."""
        with files_as(self.owner if switching else None):
            for name in os.listxattr(self.path):
                if name.startswith(AGENT_XATTRS):
                    os.removexattr(self.path, name)
            os.chmod(self.path, self.mode)


def wipe(folder: str, *, switching: bool = False) -> None:
    """Remove everything inside ``folder`` (a mount point, so the folder itself stays).

    ``switching``: act as the owners (only the executor running as root can). A folder is
    listed as its owner, and its entries removed as its owner, who may remove anything in
    a folder of its own; in a root-owned (sticky) folder each entry goes as its own
    owner. Symbolic links are removed, never followed.
    """
    owner = _owner(os.stat(folder, follow_symlinks=False), switching)
    with files_as(owner):  # a folder of mode 0700 (the verifier's) opens for its owner only
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        _empty(dir_fd, owner, switching)
    finally:
        os.close(dir_fd)


def _owner(info: os.stat_result, switching: bool) -> User | None:
    """Whom to act as for an entry: its owner, or nobody (ourselves) for root's or the fake's."""
    if not switching or info.st_uid == 0:
        return None
    return User(info.st_uid, info.st_gid)


def _empty(dir_fd: int, dir_owner: User | None, switching: bool) -> None:
    with files_as(dir_owner):
        entries = [
            (name, os.stat(name, dir_fd=dir_fd, follow_symlinks=False))
            for name in os.listdir(dir_fd)
        ]
    for name, info in entries:
        owner = _owner(info, switching)
        remover = dir_owner or owner  # a folder's owner removes anything in it
        if not stat.S_ISDIR(info.st_mode):
            with files_as(remover):
                os.unlink(name, dir_fd=dir_fd)
            continue
        with files_as(owner):
            os.chmod(name, stat.S_IRWXU, dir_fd=dir_fd)  # a folder, as stat said just now
            sub_fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
        try:
            _empty(sub_fd, owner, switching)
        finally:
            os.close(sub_fd)
        with files_as(remover):
            os.rmdir(name, dir_fd=dir_fd)


def remove_ipc_objects() -> None:
    """Remove every System V IPC object, each as its owner (IPC checks the effective uid).

    Only the executor running as root can act as the owners; in a box with nothing but
    agent processes, every object is the agent's.
    """
    for kind in ("shm", "sem", "msg"):
        try:
            header, *rows = (SYSV_IPC / kind).read_text().splitlines()
        except (OSError, ValueError):
            continue
        uid_column = header.split().index("uid")
        for row in rows:
            fields = row.split()
            ipc_id, owner = int(fields[1]), int(fields[uid_column])
            with effective_user(owner):
                if kind == "sem":
                    _libc.semctl(ipc_id, 0, IPC_RMID)
                elif kind == "shm":
                    _libc.shmctl(ipc_id, IPC_RMID, None)
                else:
                    _libc.msgctl(ipc_id, IPC_RMID, None)
