"""The last applied weights and their version, kept beside the buffer so a restart resumes.

Layout under ``<data_dir>/policy``::

    state.json          {"version": 7, "dir": "3f2a...", "files": ["model.safetensors"]}
    3f2a.../            the weights version 7 was made of (what the engine serves)
    9c1b.../            a candidate being applied: not in state.json yet
    spare.safetensors   the upload version 6 was made of, for the next upload to write over

An update *adopts* its files first (an upload is moved in, ``from-path`` files are linked
or copied: the trainer may delete its checkpoint later), the engine swaps them in, and only
then is ``state.json`` replaced (temp file, fsync, rename, directory fsync); the previous
folder is removed after that (``retire``). A crash at any point leaves either the old
state or the new one, never a mix; ``clean`` removes whatever no state names (a candidate
cut off by a kill, a spare).

The spare: a new file takes a body's bytes several times slower than the cached pages of an
old one (538 MB: 133-1328 ms against about 100 ms, measured on the 2-core VM), so the
upload a commit replaced is kept (``retire``) and the next upload is written over it
(``take_spare``). Only a file the store alone holds is kept: never one hard-linked to a
trainer's checkpoint. The cost: the disk holds the model twice.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rollgym.engine.durable import fsync_path, write_atomic
from rollgym.engine.errors import EngineError

STATE_FILE = "state.json"
SPARE_FILE = "spare.safetensors"


class PolicyState(BaseModel):
    """``state.json``: the version and the files of the weights the server serves."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int = Field(ge=1)
    dir: str = Field(pattern=r"^[0-9a-f]{32}$")
    files: list[str] = Field(min_length=1)


class PolicyStore:
    """See the module docstring."""

    def __init__(self, directory: Path):
        self.directory = directory

    def load(self) -> tuple[list[Path], int] | None:
        """The served files and their version, or None (nothing applied yet)."""
        state = self._state()
        if state is None:
            return None
        return [self.directory / state.dir / name for name in state.files], state.version

    def clean(self) -> None:
        """Remove every folder ``state.json`` does not name (leftovers of a killed update)."""
        if not self.directory.is_dir():
            return
        state = self._state()
        keep = {state.dir} if state else set()
        for child in self.directory.iterdir():
            if child.name != STATE_FILE and child.name not in keep:
                _remove(child)

    def adopt(
        self, files: Sequence[Path], *, move: bool, names: Sequence[str] | None = None
    ) -> list[Path]:
        """Place ``files`` in a fresh candidate folder (moved, or hard-linked/copied),
        under ``names`` when given (else their own)."""
        folder = self.directory / uuid.uuid4().hex
        folder.mkdir(parents=True)
        placed = []
        for source, name in zip(files, names or [f.name for f in files], strict=True):
            target = folder / name
            if move:
                os.replace(source, target)
            else:
                try:
                    os.link(source, target)
                except OSError:  # another file system, or links not allowed
                    shutil.copyfile(source, target)
            placed.append(target)
        fsync_path(folder)
        return placed

    def commit(self, files: Sequence[Path], version: int) -> Path | None:
        """Make ``files`` (adopted) the served weights at ``version``; return the folder
        they replace (None at the first commit) for ``retire``, which the caller may run
        after answering: unlinking a large file takes a while (about 100 ms for 538 MB)."""
        previous = self._state()
        folder = files[0].parent
        state = PolicyState(version=version, dir=folder.name, files=[f.name for f in files])
        write_atomic(self.directory / STATE_FILE, state.model_dump_json().encode())
        if previous is None or previous.dir == folder.name:
            return None
        return self.directory / previous.dir

    def retire(self, folder: Path) -> None:
        """Remove a folder ``commit`` replaced (if a crash comes first, ``clean`` does),
        keeping its file as the spare when it is one file that nothing else links to."""
        files = list(folder.iterdir()) if folder.is_dir() else []
        if len(files) == 1 and files[0].stat().st_nlink == 1:
            os.replace(files[0], self.directory / SPARE_FILE)
        _remove(folder)

    def take_spare(self, path: Path) -> bool:
        """Move the spare to ``path`` (on the same file system), for an upload to write
        over; whether there was one."""
        try:
            os.replace(self.directory / SPARE_FILE, path)
        except FileNotFoundError:
            return False
        return True

    def discard(self, files: Sequence[Path]) -> None:
        """Drop an adopted candidate that was not applied."""
        if files:
            _remove(files[0].parent)

    def _state(self) -> PolicyState | None:
        try:
            return PolicyState.model_validate_json((self.directory / STATE_FILE).read_bytes())
        except FileNotFoundError:
            return None
        except ValidationError as exc:
            raise EngineError(
                f"{self.directory / STATE_FILE} is unreadable ({exc}); remove the folder "
                f"{self.directory} to start again from the configured model at version 0"
            ) from exc


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
