"""Making environments for episodes: any registered env, sandboxed ones on the shared pool.

``RegistryEnvs`` builds envs with ``envs.make`` (registered ids, ``"module:Env-v0"`` ids and
the ``rollgym.envs`` entry points, plain text envs adapted to chat). An env whose
constructor takes ``sandbox_pool`` gets the server's shared pool, so every episode's box
comes warm from one place and the pool's metrics cover them all.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import gymnasium
from gymnasium.envs.registration import load_env_creator

from rollgym.sandboxes.base import SandboxPool
from rollgym.server.errors import BadRequest, NotEnabled, NotFound

PoolSource = Callable[[], SandboxPool | None]


class EnvFactory(Protocol):
    def make(
        self, env_id: str, env_kwargs: Mapping[str, object], *, max_turns: int | None
    ) -> gymnasium.Env[Any, Any]: ...

    def check(self, env_id: str) -> None:
        """Raise ``NotFound`` unless ``env_id`` can be made."""
        ...


class RegistryEnvs:
    """See the module docstring. ``pool`` returns the shared sandbox pool, if any."""

    def __init__(self, pool: PoolSource):
        self._pool = pool

    def check(self, env_id: str) -> None:
        takes_pool(env_id)

    def make(
        self, env_id: str, env_kwargs: Mapping[str, object], *, max_turns: int | None
    ) -> gymnasium.Env[Any, Any]:
        from rollgym import envs

        kwargs = dict(env_kwargs)
        if max_turns is not None:
            kwargs["max_episode_steps"] = max_turns
        if takes_pool(env_id) and "sandbox_pool" not in kwargs:
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
        except TypeError as exc:
            raise BadRequest(f"{env_id} does not take these env_kwargs: {exc}") from exc


@functools.cache
def takes_pool(env_id: str) -> bool:
    """Whether ``env_id``'s entry point takes a ``sandbox_pool``; ``NotFound`` if unknown."""
    from rollgym import envs

    envs.load_user_envs()
    module, _, _ = env_id.rpartition(":")
    try:
        if module:
            importlib.import_module(module)
        spec = gymnasium.spec(env_id.rpartition(":")[2])
    except (gymnasium.error.Error, ModuleNotFoundError) as exc:
        raise NotFound(f"no environment {env_id!r} is registered: {exc}") from exc
    entry = spec.entry_point
    creator = load_env_creator(entry) if isinstance(entry, str) else entry
    if creator is None:
        return False
    try:
        return "sandbox_pool" in inspect.signature(creator).parameters
    except (TypeError, ValueError):
        return False
