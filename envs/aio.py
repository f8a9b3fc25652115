"""Async ``reset``/``step`` for any ``gymnasium.make``'d environment.

``await areset(env, seed=..., options=...)`` and ``await astep(env, action)`` mean exactly
what ``env.reset``/``env.step`` mean, wrappers included, and never block the event loop, so
one asyncio runner can drive many episodes at once::

    env = gymnasium.make("rollgym/Shell-v0", sandbox_pool=pool)
    obs, info = await areset(env, seed=0)
    obs, reward, terminated, truncated, info = await astep(env, "```bash\\nls\\n```")

How each layer of the wrapper stack is run:

* an env or wrapper with its own ``areset``/``astep`` (rollgym's ``ChatEnv``, ``ChatAdapter``)
  natively: its sandbox I/O goes through the sandbox's ``a*`` methods;
* ``TimeLimit``, ``OrderEnforcing`` and ``PassiveEnvChecker`` (what ``gymnasium.make`` adds)
  by doing their bookkeeping here, with the same checks, around the awaited inner env;
* anything else (a foreign sync env, an unknown wrapper) whole, in a worker thread
  (``asyncio.to_thread``), which keeps its exact semantics.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol, SupportsFloat, runtime_checkable

import gymnasium
from gymnasium.error import ResetNeeded
from gymnasium.utils.passive_env_checker import (
    env_data_reuse_passive_checker,
    env_reset_passive_checker,
    env_step_passive_checker,
)
from gymnasium.wrappers import OrderEnforcing, PassiveEnvChecker, TimeLimit

StepResult = tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]
ResetResult = tuple[Any, dict[str, Any]]


@runtime_checkable
class AsyncEnv(Protocol):
    """An env (or wrapper) that can reset and step without blocking the loop."""

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult: ...

    async def astep(self, action: Any) -> StepResult: ...


async def areset(
    env: gymnasium.Env[Any, Any], *, seed: int | None = None, options: dict[str, Any] | None = None
) -> ResetResult:
    """``env.reset(seed=seed, options=options)``, awaited."""
    if isinstance(env, AsyncEnv):
        return await env.areset(seed=seed, options=options)
    if type(env) is TimeLimit:
        limit: Any = env  # Gymnasium types its step counter as None
        limit._elapsed_steps = 0
        return await areset(env.env, seed=seed, options=options)
    if type(env) is OrderEnforcing:
        env._has_reset = True
        return await areset(env.env, seed=seed, options=options)
    if type(env) is PassiveEnvChecker:
        return await _checked_reset(env, seed, options)
    return await asyncio.to_thread(env.reset, seed=seed, options=options)


async def astep(env: gymnasium.Env[Any, Any], action: Any) -> StepResult:
    """``env.step(action)``, awaited."""
    if isinstance(env, AsyncEnv):
        return await env.astep(action)
    if type(env) is TimeLimit:
        obs, reward, terminated, truncated, info = await astep(env.env, action)
        limit: Any = env  # Gymnasium types its step counter as None
        limit._elapsed_steps += 1
        if limit._elapsed_steps >= limit._max_episode_steps:
            truncated = True
        return obs, reward, terminated, truncated, info
    if type(env) is OrderEnforcing:
        if not env._has_reset:
            raise ResetNeeded("Cannot call env.step() before calling env.reset()")
        return await astep(env.env, action)
    if type(env) is PassiveEnvChecker:
        return await _checked_step(env, action)
    return await asyncio.to_thread(env.step, action)


class _Replay:
    """Hands a result that was already awaited to Gymnasium's own passive checks."""

    def __init__(self, env: gymnasium.Env[Any, Any], result: Any):
        self.observation_space = env.observation_space
        self.action_space = env.action_space
        self._result = result

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        return self._result

    def step(self, action: Any) -> Any:
        return self._result


async def _checked_reset(
    env: PassiveEnvChecker[Any, Any], seed: int | None, options: dict[str, Any] | None
) -> ResetResult:
    result = await areset(env.env, seed=seed, options=options)
    if env.checked_reset is False:
        env.checked_reset = True
        replay: Any = _Replay(env.env, result)
        env._previous_data = env_reset_passive_checker(replay, seed=seed, options=options)
    return result


async def _checked_step(env: PassiveEnvChecker[Any, Any], action: Any) -> StepResult:
    result = await astep(env.env, action)
    obs, _, _, _, info = result
    if env.checked_step is False:
        env.checked_step = True
        replay: Any = _Replay(env.env, result)
        env_step_passive_checker(replay, action)
        if env._previous_data is not None:
            env_data_reuse_passive_checker(env._previous_data, (obs, info), "reset", "step")
        env._previous_data = (obs, info)
    elif env.checked_data_reuse is False and env._previous_data is not None:
        env_data_reuse_passive_checker(env._previous_data, (obs, info), "step", "step")
        env._previous_data = None
        env.checked_data_reuse = True
    return result
