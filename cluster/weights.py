"""The cluster's copy of the weights it serves: staged once, loaded by every server.

Layout under ``<data_dir>/weights``::

    state.json     {"version": 7, "folder": "3f2a...", "files": ["model.safetensors"]}
    3f2a.../       the weights of version 7: what a restarted server is re-synced to
    9c1b.../       a candidate being fanned out: not in state.json yet

An update is *staged* first (an upload streamed into a fresh folder, or a trainer's files
hard-linked or copied in: the trainer may delete its checkpoint), then fanned out; only
when the cluster's version moved is ``state.json`` replaced (temp file, fsync, rename) and
the previous folder removed. A candidate that no server applied is discarded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import BinaryIO

from pydantic import BaseModel, ConfigDict, Field

from rollgym.cluster.errors import NoWeightFiles, WeightsTooLarge

STATE = "state.json"
_WRITE_CHUNK = 4 << 20


class _State(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int = Field(ge=0)
    folder: str
    files: list[str] = Field(min_length=1)


@dataclasses.dataclass(frozen=True)
class Staged:
    """Weights in one folder of the store: what servers load (``folder``) or receive."""

    folder: Path
    files: tuple[Path, ...]

    @property
    def nbytes(self) -> int:
        return sum(f.stat().st_size for f in self.files)


class WeightStore:
    """See the module docstring."""

    def __init__(self, directory: Path, *, max_bytes: int):
        self.directory = directory
        self.max_bytes = max_bytes

    def current(self) -> tuple[Staged, int] | None:
        """The committed weights and their version, or None before the first update."""
        try:
            state = _State.model_validate_json((self.directory / STATE).read_bytes())
        except FileNotFoundError:
            return None
        folder = self.directory / state.folder
        return Staged(folder, tuple(folder / f for f in state.files)), state.version

    async def stage_stream(self, body: AsyncIterator[bytes]) -> Staged:
        """Write an uploaded safetensors body into a new candidate folder."""
        folder = self._candidate()
        target = folder / "model.safetensors"
        received = 0
        pending: list[bytes] = []
        try:
            with target.open("wb") as f:
                async for chunk in body:
                    received += len(chunk)
                    if received > self.max_bytes:
                        raise WeightsTooLarge(
                            f"the body exceeds {self.max_bytes} bytes (max_weight_bytes)"
                        )
                    pending.append(chunk)
                    if sum(map(len, pending)) >= _WRITE_CHUNK:  # disk writes off the loop
                        await asyncio.to_thread(f.write, b"".join(pending))
                        pending = []
                await asyncio.to_thread(_finish, f, b"".join(pending))
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return Staged(folder, (target,))

    def stage_path(self, path: Path) -> Staged:
        """Hard-link (or copy) a trainer's safetensors file, or those of its checkpoint
        folder, into a new candidate folder (the trainer may delete them later)."""
        files = [path] if path.is_file() else sorted(path.glob("*.safetensors"))
        if not files:
            raise NoWeightFiles(f"{path} is no safetensors file and holds none (on the router)")
        folder = self._candidate()
        placed = []
        for source in files:
            target = folder / source.name
            try:
                os.link(source, target)
            except OSError:  # another file system, or links not allowed
                shutil.copyfile(source, target)
            placed.append(target)
        return Staged(folder, tuple(placed))

    def commit(self, staged: Staged, version: int) -> None:
        """Make ``staged`` the weights of ``version``; drop every other folder."""
        state = _State(
            version=version, folder=staged.folder.name, files=[f.name for f in staged.files]
        )
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".state-")
        with os.fdopen(fd, "wb") as f:
            f.write(state.model_dump_json().encode())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.directory / STATE)
        for child in self.directory.iterdir():
            if child.is_dir() and child.name != staged.folder.name:
                shutil.rmtree(child, ignore_errors=True)

    def discard(self, staged: Staged) -> None:
        shutil.rmtree(staged.folder, ignore_errors=True)

    def _candidate(self) -> Path:
        folder = self.directory / uuid.uuid4().hex
        folder.mkdir(parents=True)
        return folder


def _finish(f: BinaryIO, tail: bytes) -> None:
    f.write(tail)
    f.flush()
    os.fsync(f.fileno())
