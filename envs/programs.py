"""Sandbox programs: env logic written once, run with sync or async sandbox I/O.

An env's turn is a generator that *yields* sandbox calls and receives their results
(the "sans-I/O" style): the same code then runs under ``step`` (``run``, blocking calls)
and under ``astep`` (``arun``, awaited ``a*`` calls, never blocking the loop)::

    def turn(action: str) -> Program[str]:
        result = yield from shell(f"echo {action}")
        return result.stdout

A ``SandboxError`` from a call is thrown into the generator at the ``yield``, so the env
can catch what is the agent's doing (``SandboxTimeout``) and let the rest propagate.
Time spent in calls is added to a ``Meter``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Generator
from typing import Any, TypeVar, cast

from rollgym.sandboxes.base import Check, ExecResult, Graded, Grading, Sandbox, SandboxError

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class RunShell:
    command: str
    timeout: float | None = None
    stdin: str | None = None


@dataclasses.dataclass(frozen=True)
class RunPython:
    code: str
    timeout: float | None = None


@dataclasses.dataclass(frozen=True)
class WriteFile:
    path: str
    content: bytes | str


@dataclasses.dataclass(frozen=True)
class ReadFile:
    path: str


@dataclasses.dataclass(frozen=True)
class Verify:
    checks: tuple[Check, ...]


@dataclasses.dataclass(frozen=True)
class Grade:
    grading: Grading


SandboxCall = RunShell | RunPython | WriteFile | ReadFile | Verify | Grade
Program = Generator[SandboxCall, Any, T]


def shell(command: str, timeout: float | None = None) -> Program[ExecResult]:
    return cast(ExecResult, (yield RunShell(command, timeout)))


def python(code: str, timeout: float | None = None) -> Program[ExecResult]:
    return cast(ExecResult, (yield RunPython(code, timeout)))


def write_file(path: str, content: bytes | str) -> Program[None]:
    yield WriteFile(path, content)


def read_file(path: str) -> Program[bytes]:
    return cast(bytes, (yield ReadFile(path)))


def verify(checks: tuple[Check, ...]) -> Program[tuple[bool, ...]]:
    """Which ``checks`` hold, run by the box's verifier out of the agent's reach."""
    return cast(tuple[bool, ...], (yield Verify(checks)))


def grade(grading: Grading) -> Program[Graded]:
    """End the agent's part of the episode and run a task's tests as the box's verifier."""
    return cast(Graded, (yield Grade(grading)))


class Meter:
    """Sums the seconds spent in sandbox calls."""

    def __init__(self) -> None:
        self.seconds = 0.0


def run(program: Program[T], box: Sandbox, meter: Meter) -> T:
    """Run ``program`` against ``box`` with blocking calls."""
    reply: Any = None
    error: SandboxError | None = None
    while True:
        try:
            call = program.throw(error) if error else program.send(reply)
        except StopIteration as stop:
            return cast(T, stop.value)
        reply, error = None, None
        started = time.perf_counter()
        try:
            reply = _perform(call, box)
        except SandboxError as exc:
            error = exc
        finally:
            meter.seconds += time.perf_counter() - started


async def arun(program: Program[T], box: Sandbox, meter: Meter) -> T:
    """Run ``program`` against ``box`` with awaited calls."""
    reply: Any = None
    error: SandboxError | None = None
    while True:
        try:
            call = program.throw(error) if error else program.send(reply)
        except StopIteration as stop:
            return cast(T, stop.value)
        reply, error = None, None
        started = time.perf_counter()
        try:
            reply = await _aperform(call, box)
        except SandboxError as exc:
            error = exc
        finally:
            meter.seconds += time.perf_counter() - started


def _perform(call: SandboxCall, box: Sandbox) -> Any:
    match call:
        case RunShell(command, timeout, stdin):
            return box.run_shell(command, timeout=timeout, stdin=stdin)
        case RunPython(code, timeout):
            return box.run_python(code, timeout=timeout)
        case WriteFile(path, content):
            return box.write_file(path, content)
        case ReadFile(path):
            return box.read_file(path)
        case Verify(checks):
            return box.verify(checks)
        case Grade(grading):
            return box.grade(grading)


async def _aperform(call: SandboxCall, box: Sandbox) -> Any:
    match call:
        case RunShell(command, timeout, stdin):
            return await box.arun_shell(command, timeout=timeout, stdin=stdin)
        case RunPython(code, timeout):
            return await box.arun_python(code, timeout=timeout)
        case WriteFile(path, content):
            return await box.awrite_file(path, content)
        case ReadFile(path):
            return await box.aread_file(path)
        case Verify(checks):
            return await box.averify(checks)
        case Grade(grading):
            return await box.agrade(grading)
