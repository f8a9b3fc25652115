"""A task's starting files: a folder of the image copied into the agent's work dir.

A task image (a Harbor task's ``environment/``) holds its starting state in a folder of
the read-only root; the agent works in its tmpfs work dir. ``plant`` copies the one into
the other when the box starts and after every reset, so every episode starts from the
same files, owned by the agent (who may change them, as a task expects) and nothing else
of the box.

Files are read as the executor (root: an image's files may be root's alone) and created
with the agent's file-system identity, so they belong to the agent; modes are kept
without set-uid, set-gid and sticky bits. Symbolic links are copied as links, never
followed; anything that is not a folder, a regular file or a link is skipped.
"""

from __future__ import annotations

import os
import stat

from .identity import User, files_as

KEPT_MODE_BITS = 0o777  # no set-uid, set-gid or sticky bit survives the copy


def plant(seed: str, work_dir: str, owner: User | None) -> None:
    """Copy the contents of ``seed`` into ``work_dir`` (an empty folder) as ``owner``."""
    for name in sorted(os.listdir(seed)):
        _copy(os.path.join(seed, name), os.path.join(work_dir, name), owner)


def _copy(source: str, target: str, owner: User | None) -> None:
    info = os.lstat(source)
    mode = stat.S_IMODE(info.st_mode) & KEPT_MODE_BITS
    if stat.S_ISLNK(info.st_mode):
        link = os.readlink(source)
        with files_as(owner):
            os.symlink(link, target)
    elif stat.S_ISDIR(info.st_mode):
        with files_as(owner):
            os.mkdir(target, 0o700)  # room to fill it first; its own mode comes last
        for name in sorted(os.listdir(source)):
            _copy(os.path.join(source, name), os.path.join(target, name), owner)
        with files_as(owner):
            os.chmod(target, mode)
    elif stat.S_ISREG(info.st_mode):
        with open(source, "rb") as handle:
            data = handle.read()
        with files_as(owner):
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                with open(fd, "wb", closefd=False) as out:
                    out.write(data)
                os.fchmod(fd, mode)
            finally:
                os.close(fd)
