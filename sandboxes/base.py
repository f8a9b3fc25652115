"""The sandbox seam: what environments see of a box, and the errors it raises.

A sandbox's *life* (create, start, health, stop) belongs to a pool or provider; what runs
*in* it (shell, Python, files, reset) is this interface. Environments only ever hold a
``Sandbox`` handed out by a ``SandboxPool``.

Errors (one root, translated at the adapter boundary; Docker SDK errors never leak)::

    SandboxError
    ├── SandboxTimeout(SandboxError, TimeoutError)  the command ran past its timeout and was
    │                                               killed; the box stays usable (agent's fault)
    ├── SandboxDied(SandboxError)                   the box crashed, was killed, stopped
    │   │                                           answering or hit a container-level deadline:
    │   │                                           an infrastructure failure; the pool replaces it
    │   └── SandboxOOM(SandboxDied)                 ... because the box ran out of memory
    ├── SandboxFileError(SandboxError, OSError)     a file call failed in the box (missing
    │                                               file, a directory, no permission, too big)
    ├── PoolTimeout(SandboxError, TimeoutError)     no box became free within the wait
    └── SandboxStateError(SandboxError)             a call on a closed box or pool

Every call returns an ``ExecResult`` with stdout, stderr, exit code, time inside the box,
round trip, and whether output was cut at the cap.

Paths inside a box: commands start in ``WORK_DIR`` (also ``$HOME``), scratch space is
``TMP_DIR``; both are wiped by ``reset``. Envs should use these constants (or paths
relative to the work dir), never a path of their own invention: the Docker box mounts
tmpfs there and the fake maps them onto private host folders.
"""

from __future__ import annotations

import dataclasses
import enum
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Protocol, runtime_checkable

WORK_DIR = "/work"
"""The box's working directory and ``$HOME``: where commands start; wiped by reset."""

TMP_DIR = "/tmp"
"""Scratch space (``$TMPDIR``); wiped by reset."""


class SandboxError(Exception):
    """Root of all sandbox errors."""


class SandboxTimeout(SandboxError, TimeoutError):
    """The command ran past its timeout; its process group was killed. The box is usable.

    ``result`` holds what the command printed before it was killed (``None`` when the
    transport, not the command, timed out).
    """

    def __init__(self, message: str, result: ExecResult | None = None) -> None:
        super().__init__(message)
        self.result = result


class SandboxDied(SandboxError):
    """The box is gone or unresponsive: an infrastructure failure, never the agent's."""


class SandboxOOM(SandboxDied):
    """The box (or a command in it) was killed for exceeding its memory limit."""


class SandboxFileError(SandboxError, OSError):
    """A file call failed inside the box: missing file, a directory, no permission, too big."""


class PoolTimeout(SandboxError, TimeoutError):
    """No sandbox became free within the acquire timeout."""


class SandboxStateError(SandboxError):
    """A call on a sandbox or pool that is not in a state to take it (e.g. closed)."""


class SandboxState(enum.Enum):
    """Lifecycle of one box; checked on every call."""

    STARTING = "starting"
    READY = "ready"
    BUSY = "busy"
    DEAD = "dead"
    CLOSED = "closed"


@dataclasses.dataclass(frozen=True)
class ExecResult:
    """The outcome of one call in a sandbox.

    ``duration_s`` is the command's own time inside the box; ``round_trip_s`` adds the
    transport (host -> executor -> host). ``truncated`` is True when stdout or stderr was cut
    at the output cap.
    """

    stdout: str
    stderr: str
    exit_code: int
    duration_s: float
    round_trip_s: float
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@runtime_checkable
class Sandbox(Protocol):
    """What runs inside one box. Sync and async forms; the async ones never block the loop.

    ``run_python`` executes in a persistent per-episode namespace (REPL-style): names defined
    by one call are visible to the next, until ``reset``.
    """

    @property
    def id(self) -> str: ...

    @property
    def state(self) -> SandboxState: ...

    def run_shell(self, command: str, *, timeout: float | None = None) -> ExecResult: ...

    def run_python(self, code: str, *, timeout: float | None = None) -> ExecResult: ...

    def write_file(self, path: str, content: bytes | str) -> None: ...

    def read_file(self, path: str) -> bytes: ...

    def reset(self) -> None: ...

    async def arun_shell(self, command: str, *, timeout: float | None = None) -> ExecResult: ...

    async def arun_python(self, code: str, *, timeout: float | None = None) -> ExecResult: ...

    async def awrite_file(self, path: str, content: bytes | str) -> None: ...

    async def aread_file(self, path: str) -> bytes: ...

    async def areset(self) -> None: ...


@runtime_checkable
class SandboxPool(Protocol):
    """Hands out ready boxes. ``release`` resets the box (or replaces it if it died).

    Prefer the context managers, which always release::

        with pool.sandbox(timeout=5) as box:
            box.run_shell("echo hi")

        async with pool.asandbox(timeout=5) as box:
            await box.arun_python("x = 1")
    """

    def acquire(self, *, timeout: float | None = None) -> Sandbox: ...

    def release(self, sandbox: Sandbox) -> None: ...

    async def aacquire(self, *, timeout: float | None = None) -> Sandbox: ...

    async def arelease(self, sandbox: Sandbox) -> None: ...

    def sandbox(self, *, timeout: float | None = None) -> AbstractContextManager[Sandbox]: ...

    def asandbox(self, *, timeout: float | None = None) -> AbstractAsyncContextManager[Sandbox]: ...

    def close(self) -> None: ...
