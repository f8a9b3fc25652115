"""The sandbox seam: what environments see of a box, and the errors it raises.

A sandbox's *life* (create, start, health, stop) belongs to a pool or provider; what runs
*in* it (shell, Python, files, checks, reset) is this interface. Environments only ever
hold a ``Sandbox`` handed out by a ``SandboxPool``.

Who caused a failure is in the error's type. The trusted side of a box (its executor,
sockets and verifier) runs under other users than the agent, where agent code cannot
write, signal or ptrace, so whatever the agent does, the box survives it: the agent's
doing is an ``AgentFault`` (a task failure), and a box that dies anyway is the
infrastructure's (``SandboxDied``).

Errors (one root, translated at the adapter boundary; Docker SDK errors never leak)::

    SandboxError
    ├── AgentFault(SandboxError)                    the agent's own command broke something in
    │   │                                           its box; the box lives on. A task failure:
    │   │                                           train on it, never drop the episode for it
    │   ├── SandboxTimeout(AgentFault, TimeoutError)  ran past its timeout and was killed
    │   └── SandboxOOM(AgentFault)                    ran out of memory and was killed (the pool
    │                                                 retires the box when it comes back)
    ├── SandboxDied(SandboxError)                   the box crashed, was killed, stopped
    │                                               answering or hit a container-level deadline:
    │                                               an infrastructure failure; the pool replaces it
    ├── SandboxFileError(SandboxError, OSError)     a file call failed in the box (missing
    │                                               file, not a regular file, a bad path, no
    │                                               permission, too big)
    ├── PoolTimeout(SandboxError, TimeoutError)     no box became free within the wait
    └── SandboxStateError(SandboxError)             a call on a closed box or pool

Every command returns an ``ExecResult`` with stdout, stderr, exit code, time inside the
box, round trip, and whether output was cut at the cap. ``verify`` runs a task's
``Check``s as the box's verifier (another user, the agent's processes frozen) and says
which hold: what decides a reward never runs where the agent can reach it. ``grade``
ends the episode: every agent process is killed, then a task's tests are put in the
box's verifier folders and run as the verifier, and the files they wrote come back
(``Grading`` -> ``Graded``): a Harbor task's ``tests/test.sh`` and its reward file.

Paths inside a box: commands start in ``WORK_DIR`` (also ``$HOME``), scratch space is
``TMP_DIR``; both are wiped by ``reset``. Envs should use these constants (or paths
relative to the work dir), never a path of their own invention: the Docker box mounts
tmpfs there and the fake maps them onto private host folders.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Protocol, runtime_checkable

WORK_DIR = "/work"
"""The box's working directory and ``$HOME``: where commands start; wiped by reset."""

TMP_DIR = "/tmp"
"""Scratch space (``$TMPDIR``); wiped by reset."""


class SandboxError(Exception):
    """Root of all sandbox errors."""


class AgentFault(SandboxError):
    """The agent's own command failed the box's limits; the box is still usable.

    ``result`` holds what the command printed before it was killed, if anything.
    """

    def __init__(self, message: str, result: ExecResult | None = None) -> None:
        super().__init__(message)
        self.result = result


class SandboxTimeout(AgentFault, TimeoutError):
    """The command ran past its timeout; its process group was killed."""


class SandboxOOM(AgentFault):
    """A command (or the Python session) was killed for exceeding the box's memory."""


class SandboxDied(SandboxError):
    """The box is gone or unresponsive: an infrastructure failure, never the agent's.

    The agent cannot reach the executor; a box that dies of anything the agent did is a
    hole in the boundary: reproduce it in ``tests/docker/test_attacks.py`` first.
    """


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


@dataclasses.dataclass(frozen=True)
class Check:
    """One condition a verifier tests: a shell command that exits 0 when it holds.

    It runs as the box's verifier user in the work dir, with ``stdin`` (data the env got
    from the agent, e.g. a program's output) on its standard input, for at most
    ``timeout`` seconds; a check that times out or cannot start does not hold.
    """

    command: str
    stdin: str = ""
    timeout: float = 5.0


@dataclasses.dataclass(frozen=True)
class Grading:
    """A task's verifier, run once the agent is done (``Sandbox.grade``).

    ``files`` (absolute box paths inside the box's ``verifier_dirs``) are written as the
    verifier, executable, after those folders were emptied; ``command`` runs as the
    verifier in ``cwd`` with a bare environment plus ``environment``, for at most
    ``timeout`` seconds; then ``read`` (paths inside the verifier folders) are read back
    as the verifier, each at most the box's ``max_file_bytes``.
    """

    command: str
    files: Mapping[str, bytes] = dataclasses.field(default_factory=dict)
    read: tuple[str, ...] = ()
    cwd: str = WORK_DIR
    timeout: float = 600.0
    environment: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Graded:
    """What a ``Grading`` produced: its exit code, whether it ran out of time, its output
    (stdout and stderr together, cut at the output cap) and the files read back (None for
    a file that was not there)."""

    exit_code: int
    timed_out: bool
    duration_s: float
    output: str
    files: Mapping[str, bytes | None]


@runtime_checkable
class Sandbox(Protocol):
    """What runs inside one box. Sync and async forms; the async ones never block the loop.

    ``run_shell`` runs as the agent, with ``stdin`` on its standard input (nothing if None).
    ``run_python`` executes in a persistent per-episode namespace (REPL-style): names defined
    by one call are visible to the next, until ``reset``. ``verify`` runs checks out of the
    agent's reach and returns whether each holds; ``grade`` ends the agent's part of the
    episode and runs a task's verifier (nothing of the agent runs after it, until reset).
    """

    @property
    def id(self) -> str: ...

    @property
    def state(self) -> SandboxState: ...

    def run_shell(
        self, command: str, *, timeout: float | None = None, stdin: str | bytes | None = None
    ) -> ExecResult: ...

    def run_python(self, code: str, *, timeout: float | None = None) -> ExecResult: ...

    def write_file(self, path: str, content: bytes | str) -> None: ...

    def read_file(self, path: str) -> bytes: ...

    def verify(self, checks: Sequence[Check]) -> tuple[bool, ...]: ...

    def grade(self, grading: Grading) -> Graded: ...

    def reset(self) -> None: ...

    async def arun_shell(
        self, command: str, *, timeout: float | None = None, stdin: str | bytes | None = None
    ) -> ExecResult: ...

    async def arun_python(self, code: str, *, timeout: float | None = None) -> ExecResult: ...

    async def awrite_file(self, path: str, content: bytes | str) -> None: ...

    async def aread_file(self, path: str) -> bytes: ...

    async def averify(self, checks: Sequence[Check]) -> tuple[bool, ...]: ...

    async def agrade(self, grading: Grading) -> Graded: ...

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
