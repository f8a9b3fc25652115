"""``PoolHandle``: a sandbox pool as an env's spec holds it, shared and never copied.

``gymnasium.make(id, sandbox_pool=pool)`` records ``pool`` in the env's ``EnvSpec``, and
Gymnasium's wrappers deep-copy that spec whenever ``env.spec`` is read; a pool of live
boxes (threads, locks, containers) cannot be copied, and a copy would be a second pool
anyway. A sandboxed env therefore keeps a ``PoolHandle`` in its spec: it forwards every
``SandboxPool`` call to the pool and copies to itself, so ``env.spec`` works and
``env.spec.make()`` makes an env on the same pool.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any

from rollgym.sandboxes.base import Sandbox, SandboxPool


class PoolHandle:
    """A ``SandboxPool`` that forwards to ``pool`` and is shared by copies."""

    def __init__(self, pool: SandboxPool):
        self.pool: SandboxPool = pool.pool if isinstance(pool, PoolHandle) else pool

    def __copy__(self) -> PoolHandle:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> PoolHandle:
        return self

    def __repr__(self) -> str:
        return f"PoolHandle({self.pool!r})"

    def acquire(self, *, timeout: float | None = None) -> Sandbox:
        return self.pool.acquire(timeout=timeout)

    def release(self, sandbox: Sandbox) -> None:
        self.pool.release(sandbox)

    async def aacquire(self, *, timeout: float | None = None) -> Sandbox:
        return await self.pool.aacquire(timeout=timeout)

    async def arelease(self, sandbox: Sandbox) -> None:
        await self.pool.arelease(sandbox)

    def sandbox(self, *, timeout: float | None = None) -> AbstractContextManager[Sandbox]:
        return self.pool.sandbox(timeout=timeout)

    def asandbox(self, *, timeout: float | None = None) -> AbstractAsyncContextManager[Sandbox]:
        return self.pool.asandbox(timeout=timeout)

    def close(self) -> None:
        self.pool.close()
