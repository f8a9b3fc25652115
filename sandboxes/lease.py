"""``PooledSandbox``: the handle a pool hands out, dead once it goes back to the pool.

It forwards every call to the box it leases. After ``release`` it refuses calls with
``SandboxStateError``, so an environment that kept a reference can never reach the next
episode's box.
"""

from __future__ import annotations

from collections.abc import Sequence

from .base import Check, ExecResult, Graded, Grading, SandboxState, SandboxStateError
from .box import ExecutorSandbox


class PooledSandbox:
    def __init__(self, box: ExecutorSandbox, owner: object) -> None:
        self._box: ExecutorSandbox | None = box
        self._id = box.id
        self.owner = owner

    def _live(self) -> ExecutorSandbox:
        if self._box is None:
            raise SandboxStateError(f"sandbox {self._id} was released to its pool")
        return self._box

    def detach(self) -> ExecutorSandbox:
        """End the lease and return the box (the pool's half of ``release``)."""
        box = self._live()
        self._box = None
        return box

    @property
    def id(self) -> str:
        return self._id

    @property
    def state(self) -> SandboxState:
        return SandboxState.CLOSED if self._box is None else self._box.state

    def __repr__(self) -> str:
        return f"<PooledSandbox {self._id} {self.state.value}>"

    def run_shell(
        self, command: str, *, timeout: float | None = None, stdin: str | bytes | None = None
    ) -> ExecResult:
        return self._live().run_shell(command, timeout=timeout, stdin=stdin)

    def run_python(self, code: str, *, timeout: float | None = None) -> ExecResult:
        return self._live().run_python(code, timeout=timeout)

    def write_file(self, path: str, content: bytes | str) -> None:
        self._live().write_file(path, content)

    def read_file(self, path: str) -> bytes:
        return self._live().read_file(path)

    def verify(self, checks: Sequence[Check]) -> tuple[bool, ...]:
        return self._live().verify(checks)

    def grade(self, grading: Grading) -> Graded:
        return self._live().grade(grading)

    def reset(self) -> None:
        self._live().reset()

    async def arun_shell(
        self, command: str, *, timeout: float | None = None, stdin: str | bytes | None = None
    ) -> ExecResult:
        return await self._live().arun_shell(command, timeout=timeout, stdin=stdin)

    async def arun_python(self, code: str, *, timeout: float | None = None) -> ExecResult:
        return await self._live().arun_python(code, timeout=timeout)

    async def awrite_file(self, path: str, content: bytes | str) -> None:
        await self._live().awrite_file(path, content)

    async def aread_file(self, path: str) -> bytes:
        return await self._live().aread_file(path)

    async def averify(self, checks: Sequence[Check]) -> tuple[bool, ...]:
        return await self._live().averify(checks)

    async def agrade(self, grading: Grading) -> Graded:
        return await self._live().agrade(grading)

    async def areset(self) -> None:
        await self._live().areset()
