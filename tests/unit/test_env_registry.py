"""Conformance over the whole ``rollgym/`` registry: Gymnasium's ``check_env`` and a seeded
determinism rollout on every registered env (sandboxed ones on the fake pool here; their
real twin runs in tests/docker/test_env_docker.py)."""

from __future__ import annotations

import inspect

import gymnasium
import pytest
from gymnasium.envs.registration import load_env_creator
from gymnasium.utils.env_checker import check_env

from rollgym import envs
from rollgym.envs.sandboxed import SandboxEnv
from rollgym.envs.scripted import solver
from rollgym.sandboxes.config import PoolConfig
from rollgym.sandboxes.fake import FakeSandboxPool

ROLLGYM_IDS = sorted(env_id for env_id in gymnasium.registry if env_id.startswith("rollgym/"))


def is_sandboxed(env_id: str) -> bool:
    return issubclass(load_env_creator(gymnasium.spec(env_id).entry_point), SandboxEnv)


@pytest.fixture(scope="module")
def pool():
    with FakeSandboxPool(PoolConfig(size=2, health_interval_s=0)) as pool:
        yield pool


def make(env_id: str, pool, **kwargs):
    if is_sandboxed(env_id):
        kwargs["sandbox_pool"] = pool
    return gymnasium.make(env_id, **kwargs)


def test_the_reference_envs_are_registered_with_string_entry_points_and_turn_limits() -> None:
    assert {entry.env_id for entry in envs.BUILTIN} <= set(ROLLGYM_IDS)
    for env_id in ROLLGYM_IDS:
        spec = gymnasium.spec(env_id)
        assert isinstance(spec.entry_point, str)
        assert spec.max_episode_steps and spec.max_episode_steps > 1


def test_sandboxed_envs_name_sandbox_pool_in_their_signature() -> None:
    """The server passes its pool to envs whose constructor names ``sandbox_pool``."""
    sandboxed = [env_id for env_id in ROLLGYM_IDS if is_sandboxed(env_id)]
    assert len(sandboxed) == 5
    for env_id in sandboxed:
        creator = load_env_creator(gymnasium.spec(env_id).entry_point)
        assert "sandbox_pool" in inspect.signature(creator).parameters


@pytest.mark.parametrize("env_id", ROLLGYM_IDS)
def test_check_env(env_id: str, pool) -> None:
    """Gymnasium's own checker, on the env as ``gymnasium.make`` makes it (nothing injected)."""
    env = make(env_id, pool)
    try:
        check_env(env.unwrapped)
    finally:
        env.close()


def rollout(env_id: str, pool, seed: int, steps: int = 4) -> list:
    """Alternate seeded random text and the scripted solver's messages."""
    env = make(env_id, pool, max_episode_steps=steps + 1)
    env.action_space.seed(seed)
    trace = []
    try:
        obs, info = env.reset(seed=seed)
        history = list(obs)
        trace.append((obs, info))
        for turn in range(steps):
            action = env.action_space.sample() if turn % 2 == 0 else solver(env)(history)
            obs, reward, terminated, truncated, info = env.step(action)
            history += [{"role": "assistant", "content": action}, *obs]
            trace.append(
                (
                    action,
                    obs,
                    reward,
                    terminated,
                    truncated,
                    info,
                )
            )
            if terminated or truncated:
                break
    finally:
        env.close()
    return trace


@pytest.mark.parametrize("env_id", ROLLGYM_IDS)
def test_seeded_rollouts_are_deterministic(env_id: str, pool) -> None:
    first = rollout(env_id, pool, seed=11)
    assert first == rollout(env_id, pool, seed=11)
    others = [rollout(env_id, pool, seed=s)[0] for s in range(12, 20)]
    assert any(other != first[0] for other in others), "the seed should change the task"
