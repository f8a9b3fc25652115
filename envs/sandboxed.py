"""``SandboxEnv``: a ``ChatEnv`` whose turns run in a sandbox from a pool.

A subclass writes its logic as programs (``envs.programs``) instead of ``_open``/``_turn``::

    _open_program(options) -> Program[Opening]     set the task up in the box
    _turn_program(action)  -> Program[Turn]         act in the box

and the base runs them with blocking calls under ``step`` and awaited calls under
``astep``. Box life: each ``reset`` releases the previous box to the pool (which resets or
replaces it) and acquires a fresh one; ``close`` releases it. Pass a pool with
``gymnasium.make(id, sandbox_pool=pool)``; without one the env creates a small Docker pool
on its first reset, owns it and closes it on ``close``.

Failure kinds, by who caused them: ``agent_command`` turns the agent's own command
running past its timeout or out of memory (an ``AgentFault``: the box lives on) into
feedback, a task failure. The trusted side of the box is out of the agent's reach, so
every other ``SandboxError`` (box died or stopped answering, pool timeout, a broken
executor) reaches ``ChatEnv`` and is an infrastructure failure. What decides a reward runs
out of the agent's reach too: checks through ``programs.verify`` (the box's verifier),
comparisons of the agent's answers on the host.
"""

from __future__ import annotations

import abc
import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any, TypedDict

from gymnasium.envs.registration import EnvSpec

from rollgym.envs.core import ChatEnv, EpisodeT, Opening, StepT, Turn
from rollgym.envs.messages import clean_text, clip_text
from rollgym.envs.pool_handle import PoolHandle
from rollgym.envs.programs import Program, RunPython, RunShell, arun, run
from rollgym.sandboxes.base import (
    AgentFault,
    ExecResult,
    Sandbox,
    SandboxPool,
    SandboxTimeout,
)


@dataclasses.dataclass(frozen=True)
class AgentRun:
    """The agent's command: its result, or why it has none (timeout, out of memory)."""

    result: ExecResult | None
    problem: str | None = None

    def describe(self, limit: int) -> str:
        """The feedback text for the agent, at most about ``limit`` characters."""
        if self.result is None:
            return self.problem or "The command produced no result."
        return describe_result(self.result, limit)


def describe_result(result: ExecResult, limit: int) -> str:
    """Exit code, stdout and stderr, cleaned of binary bytes and cut to ``limit``."""
    parts = [f"exit code {result.exit_code}"]
    streams = [
        (name, text)
        for name, text in (("stdout", result.stdout), ("stderr", result.stderr))
        if text
    ]
    for name, text in streams:
        parts.append(f"{name}:\n{clip_text(clean_text(text), max(limit // len(streams), 80))}")
    if result.truncated:
        parts.append("(output was cut at the sandbox's limit)")
    return "\n".join(parts)


class SandboxOptions(TypedDict, total=False):
    """Keyword options every sandboxed env takes besides ``sandbox_pool``."""

    acquire_timeout_s: float
    command_timeout_s: float
    max_feedback_chars: int
    max_action_chars: int


class SandboxEnv(ChatEnv[StepT, EpisodeT]):
    """Base of envs that run in a sandbox; see the module docstring."""

    _spec: EnvSpec | None = None

    def __init__(
        self,
        *,
        step_reward: Callable[[StepT], float],
        terminal_reward: Callable[[EpisodeT], float] | None = None,
        sandbox_pool: SandboxPool | None = None,
        acquire_timeout_s: float = 120.0,
        command_timeout_s: float = 10.0,
        max_feedback_chars: int = 2_000,
        max_action_chars: int = 32_000,
    ):
        super().__init__(
            step_reward=step_reward,
            terminal_reward=terminal_reward,
            max_action_chars=max_action_chars,
        )
        self._pool = sandbox_pool
        self._owns_pool = sandbox_pool is None
        self._box: Sandbox | None = None
        self.acquire_timeout_s = acquire_timeout_s
        self.command_timeout_s = command_timeout_s
        self.max_feedback_chars = max_feedback_chars

    # --- hooks for subclasses -------------------------------------------------------------

    @abc.abstractmethod
    def _open_program(self, options: dict[str, Any]) -> Program[Opening]: ...

    @abc.abstractmethod
    def _turn_program(self, action: str) -> Program[Turn[StepT]]: ...

    def agent_command(self, call: RunShell | RunPython) -> Program[AgentRun]:
        """Run the agent's own command; its timeout or OOM (an ``AgentFault``) is feedback."""
        try:
            return AgentRun(result=(yield call))
        except AgentFault as exc:
            if isinstance(exc, SandboxTimeout):
                seconds = call.timeout or self.command_timeout_s
                problem = f"The command timed out after {seconds:g} s and was killed."
            else:
                problem = "The command ran out of memory and was killed."
            if exc.result is not None and (exc.result.stdout or exc.result.stderr):
                problem += "\n" + describe_result(exc.result, self.max_feedback_chars)
            return AgentRun(result=None, problem=problem)

    # --- ChatEnv hooks --------------------------------------------------------------------

    def _open(self, options: dict[str, Any]) -> Opening:
        if self._box is not None:
            box, self._box = self._box, None
            self._sandbox_pool().release(box)
        self._box = self._sandbox_pool().acquire(timeout=self.acquire_timeout_s)
        return run(self._open_program(options), self._box, self._meter)

    async def _aopen(self, options: dict[str, Any]) -> Opening:
        if self._box is not None:
            box, self._box = self._box, None
            await (await self._asandbox_pool()).arelease(box)
        self._box = await (await self._asandbox_pool()).aacquire(timeout=self.acquire_timeout_s)
        return await arun(self._open_program(options), self._box, self._meter)

    def _turn(self, action: str) -> Turn[StepT]:
        assert self._box is not None, "ChatEnv only steps a running episode"
        return run(self._turn_program(action), self._box, self._meter)

    async def _aturn(self, action: str) -> Turn[StepT]:
        assert self._box is not None, "ChatEnv only steps a running episode"
        return await arun(self._turn_program(action), self._box, self._meter)

    def close(self) -> None:
        """Release the box; close the pool if this env made it. Safe to call twice."""
        try:
            if self._box is not None and self._pool is not None:
                box, self._box = self._box, None
                self._pool.release(box)
        finally:
            if self._owns_pool and self._pool is not None:
                pool, self._pool = self._pool, None
                pool.close()
            super().close()

    @property
    def sandbox_pool(self) -> SandboxPool | None:
        """The pool boxes come from (None before the first reset of an env that owns one)."""
        return self._pool

    @property
    def spec(self) -> EnvSpec | None:
        return self._spec

    @spec.setter
    def spec(self, spec: EnvSpec | None) -> None:
        """Keep the pool in the spec behind a ``PoolHandle`` (see ``envs.pool_handle``)."""
        pool = spec.kwargs.get("sandbox_pool") if spec is not None else None
        if spec is not None and pool is not None:
            spec = dataclasses.replace(
                spec, kwargs={**spec.kwargs, "sandbox_pool": PoolHandle(pool)}
            )
        self._spec = spec

    def _sandbox_pool(self) -> SandboxPool:
        if self._pool is None:
            self._pool = default_pool()
        return self._pool

    async def _asandbox_pool(self) -> SandboxPool:
        if self._pool is None:
            self._pool = await asyncio.to_thread(default_pool)
        return self._pool


def default_pool() -> SandboxPool:
    """A small Docker pool for an env made without ``sandbox_pool`` (one warm box)."""
    from rollgym.sandboxes.config import PoolConfig
    from rollgym.sandboxes.docker import DockerSandboxPool  # Docker only when it is needed

    pool = DockerSandboxPool(PoolConfig(size=1))
    pool.start()
    return pool
