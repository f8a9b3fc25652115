"""The cluster benchmark's environment: every step waits on a slow service with few slots.

``rollgym-bench/SlowService-v0`` stands for a sandboxed environment whose latency dominates:
each step holds one of ``slots`` places (like a sandbox pool of that size, one pool per
server process) for ``latency_s`` seconds. Importing this module registers it, so a
server makes it from the id ``bench.cluster_env:rollgym-bench/SlowService-v0``.
``rollgym-bench/SlowBox-v0`` is the same with real sandboxes (``bench.sandbox_hosts``).
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import gymnasium

from rollgym.envs.spaces import ChatText, Messages

ENV_ID = "rollgym-bench/SlowService-v0"
BOX_ENV_ID = "rollgym-bench/SlowBox-v0"
# One pool of slots per server process, as a server has one sandbox pool.
_POOLS: dict[int, asyncio.Semaphore] = {}


class SlowServiceEnv(gymnasium.Env[Any, str]):
    """``turns`` steps, each holding a slot for ``latency_s`` seconds; random rewards."""

    def __init__(self, *, turns: int = 2, latency_s: float = 0.5, slots: int = 4):
        self.observation_space = Messages()
        self.action_space = ChatText()
        self.turns, self.latency_s, self.slots = turns, latency_s, slots
        self._rng = random.Random()
        self._step = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self._rng, self._step = random.Random(seed), 0
        return ({"role": "user", "content": f"Task {seed}: answer anything."},), {}

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> Any:
        return self.reset(seed=seed, options=options)

    def step(self, action: str) -> Any:
        raise NotImplementedError("the benchmark's env is stepped asynchronously (astep)")

    async def astep(self, action: str) -> Any:
        async with _POOLS.setdefault(self.slots, asyncio.Semaphore(self.slots)):
            await asyncio.sleep(self.latency_s)
        self._step += 1
        done = self._step >= self.turns
        return ({"role": "user", "content": "Go on."},), self._rng.random(), done, False, {}


class SlowBoxEnv(SlowServiceEnv):
    """The same episodes with a real sandbox in each: a box from the server's pool for the
    episode (the pool's size is the slots), and each step a Python call in it that sleeps
    ``latency_s``: every step crosses the executor's round trip to wherever boxes live."""

    def __init__(self, *, turns: int = 2, latency_s: float = 0.5, sandbox_pool: Any = None):
        super().__init__(turns=turns, latency_s=latency_s, slots=1)
        if sandbox_pool is None:
            raise ValueError("SlowBox runs on a server: it needs the server's sandbox pool")
        self.sandbox_pool = sandbox_pool
        self._box: Any = None

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> Any:
        await self._release()
        self._box = await self.sandbox_pool.aacquire(timeout=600)
        return self.reset(seed=seed, options=options)

    async def astep(self, action: str) -> Any:
        await self._box.arun_python(f"import time; time.sleep({self.latency_s})")
        self._step += 1
        done = self._step >= self.turns
        if done:
            await self._release()
        return ({"role": "user", "content": "Go on."},), self._rng.random(), done, False, {}

    async def _release(self) -> None:
        if self._box is not None:
            box, self._box = self._box, None
            await self.sandbox_pool.arelease(box)

    def close(self) -> None:
        if self._box is not None:
            box, self._box = self._box, None
            self.sandbox_pool.release(box)


if ENV_ID not in gymnasium.registry:
    gymnasium.register(ENV_ID, entry_point=SlowServiceEnv, max_episode_steps=8)
if BOX_ENV_ID not in gymnasium.registry:
    gymnasium.register(BOX_ENV_ID, entry_point=SlowBoxEnv, max_episode_steps=8)
