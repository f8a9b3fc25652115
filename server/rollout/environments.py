"""Making environments for episodes: any registered env, sandboxed ones on the shared pool.

``RegistryEnvs`` builds envs with ``envs.make`` (registered ids, ``"module:Env-v0"`` ids and
the ``rollgym.envs`` entry points, plain text envs adapted to chat). An env whose
constructor takes ``sandbox_pool`` gets the server's shared pool, so every episode's box
comes warm from one place and the pool's metrics cover them all; without a pool such an
env is refused (``NotEnabled``), never left to start containers of its own.

A constructor that refuses its kwargs (or crashes on them) is the request's fault: a
``BadRequest`` (422) that names the env. Constructors may read files or import modules, so
callers make envs off the event loop (``amake``). Who may make which env with which kwargs
is decided before, by ``server.access.env_access``.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import gymnasium
from gymnasium.envs.registration import load_env_creator

from rollgym.sandboxes.base import SandboxPool
from rollgym.server.errors import BadRequest, NotEnabled, NotFound, ServerError

PoolSource = Callable[[], SandboxPool | None]


class EnvFactory(Protocol):
    def make(
        self, env_id: str, env_kwargs: Mapping[str, object], *, max_turns: int | None
    ) -> gymnasium.Env[Any, Any]:
        """The env, or ``NotFound`` (unknown id), ``BadRequest`` (kwargs), ``NotEnabled``."""
        ...


async def amake(
    envs: EnvFactory, env_id: str, env_kwargs: Mapping[str, object], *, max_turns: int | None
) -> gymnasium.Env[Any, Any]:
    """``envs.make`` in a worker thread: a constructor may read files or import modules."""
    return await asyncio.to_thread(envs.make, env_id, env_kwargs, max_turns=max_turns)


class RegistryEnvs:
    """See the module docstring. ``pool`` returns the shared sandbox pool, if any."""

    def __init__(self, pool: PoolSource):
        self._pool = pool

    def make(
        self, env_id: str, env_kwargs: Mapping[str, object], *, max_turns: int | None
    ) -> gymnasium.Env[Any, Any]:
        from rollgym import envs

        kwargs = dict(env_kwargs)
        if max_turns is not None:
            kwargs["max_episode_steps"] = max_turns
        if takes_pool(env_id):
            pool = self._pool()
            if pool is None:
                raise NotEnabled(
                    f"{env_id} runs in sandboxes and the server has no sandbox pool: "
                    "start it with ROLLGYM_SANDBOXES__POOL_SIZE > 0"
                )
            kwargs["sandbox_pool"] = pool
        try:
            return envs.make(env_id, **kwargs)
        except envs.EnvLoadError as exc:
            raise NotFound(str(exc)) from exc
        except ServerError:
            raise
        except Exception as exc:  # the constructor refused these kwargs, or crashed on them
            raise BadRequest(
                f"{env_id} cannot be made with env_kwargs {sorted(env_kwargs)}: {exc!r}"
            ) from exc


def holds_sandbox(env: gymnasium.Env[Any, Any]) -> bool:
    """Whether ``env`` plays in a box of a pool: its ``reset`` takes one, ``close`` frees it."""
    return getattr(env.unwrapped, "sandbox_pool", None) is not None


@functools.lru_cache(maxsize=256)
def takes_pool(env_id: str) -> bool:
    """Whether ``env_id``'s entry point takes a ``sandbox_pool``; ``NotFound`` if unknown."""
    from rollgym import envs

    envs.load_user_envs()
    module, _, name = env_id.rpartition(":")
    try:
        if module:
            importlib.import_module(module)
        spec = gymnasium.spec(name)
    except (gymnasium.error.Error, ImportError, ValueError) as exc:
        raise NotFound(f"no environment {env_id!r} is registered: {exc}") from exc
    entry = spec.entry_point
    try:
        creator = load_env_creator(entry) if isinstance(entry, str) else entry
    except (ImportError, AttributeError) as exc:
        raise NotFound(f"{env_id}'s entry point cannot be loaded: {exc}") from exc
    if creator is None:
        return False
    try:
        return "sandbox_pool" in inspect.signature(creator).parameters
    except (TypeError, ValueError):
        return False
