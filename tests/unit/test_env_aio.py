"""``envs.aio``: async reset/step with exact wrapper semantics, native sandbox I/O for
rollgym envs, a worker thread for foreign sync envs, many episodes at once."""

from __future__ import annotations

import asyncio
import threading

import gymnasium
import pytest
from gymnasium import spaces
from gymnasium.error import ResetNeeded
from gymnasium.wrappers import PassiveEnvChecker, TransformReward

from rollgym.envs.aio import areset, astep
from rollgym.envs.scripted import fenced, solver
from rollgym.sandboxes.config import PoolConfig
from rollgym.sandboxes.fake import FakeSandboxPool


class RecordingBox:
    """Forwards to a leased box and records which calls were made, and how many overlap."""

    def __init__(self, box, pool: RecordingPool):
        self.box, self.pool = box, pool

    def __getattr__(self, name: str):
        target = getattr(self.box, name)
        if name.startswith("a") and name != "aread_file_sync":

            async def call(*args, **kwargs):
                self.pool.enter(name)
                try:
                    return await target(*args, **kwargs)
                finally:
                    self.pool.leave()

            return call

        def sync_call(*args, **kwargs):
            self.pool.enter(name)
            try:
                return target(*args, **kwargs)
            finally:
                self.pool.leave()

        return sync_call if callable(target) else target


class RecordingPool:
    def __init__(self, pool):
        self.inner, self.calls, self.in_flight, self.most_in_flight = pool, [], 0, 0

    def enter(self, name: str) -> None:
        self.calls.append(name)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)

    def leave(self) -> None:
        self.in_flight -= 1

    def acquire(self, *, timeout=None):
        return RecordingBox(self.inner.acquire(timeout=timeout), self)

    async def aacquire(self, *, timeout=None):
        return RecordingBox(await self.inner.aacquire(timeout=timeout), self)

    def release(self, box) -> None:
        self.inner.release(box.box)

    async def arelease(self, box) -> None:
        await self.inner.arelease(box.box)

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def pool():
    with FakeSandboxPool(PoolConfig(size=3, health_interval_s=0)) as pool:
        yield pool


def sync_trace(env, actions, seed):
    trace = [env.reset(seed=seed)]
    trace += [env.step(a) for a in actions]
    return trace


async def async_trace(env, actions, seed):
    trace = [await areset(env, seed=seed)]
    trace += [await astep(env, a) for a in actions]
    return trace


async def test_async_matches_sync_exactly_through_gymnasiums_wrappers() -> None:
    actions = ["20", "oops", "1", "2"]  # invalid, invalid, then guesses up to the limit
    make = lambda: gymnasium.make("rollgym/GuessNumber-v0", max_episode_steps=4)  # noqa: E731
    expected = sync_trace(make(), actions, seed=5)
    assert expected[-1][3] is True  # the last step is truncated by TimeLimit
    assert await async_trace(make(), actions, seed=5) == expected


async def test_async_keeps_the_wrappers_checks() -> None:
    env = gymnasium.make("rollgym/GuessNumber-v0")
    with pytest.raises(ResetNeeded):
        await astep(env, "1")
    await areset(env)
    await astep(env, "1")
    checker = env.env.env
    assert isinstance(checker, PassiveEnvChecker)
    assert checker.checked_reset and checker.checked_step


class BadObservationEnv(gymnasium.Env):
    observation_space = spaces.Discrete(2)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return 7, {}

    def step(self, action):
        return 0, 0.0, False, False, {}


async def test_gymnasiums_passive_checks_run_on_awaited_results() -> None:
    env = PassiveEnvChecker(BadObservationEnv())
    with pytest.warns(UserWarning, match="not within the observation space"):
        await areset(env)


async def test_unknown_wrappers_keep_their_own_semantics() -> None:
    env = TransformReward(gymnasium.make("rollgym/GuessNumber-v0"), lambda r: 10 * r)
    await areset(env, options={"task_id": "guess-3"})
    _, reward, *_ = await astep(env, "99")
    assert reward == pytest.approx(-1.0)


class HandshakeEnv(gymnasium.Env):
    """A foreign sync env whose step waits for the event loop to do something."""

    observation_space = spaces.Text(max_length=10)
    action_space = spaces.Text(max_length=10)

    def __init__(self):
        self.go = threading.Event()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "start", {}

    def step(self, action):
        answered = self.go.wait(timeout=30)
        return ("ok" if answered else "loop was blocked"), 0.0, True, False, {}


async def test_a_foreign_sync_env_does_not_block_the_loop() -> None:
    env = HandshakeEnv()
    await areset(env)

    async def release_soon():
        await asyncio.sleep(0)
        env.go.set()

    (obs, *_), _ = await asyncio.gather(astep(env, "x"), release_soon())
    assert obs == "ok"


async def test_sandboxed_envs_use_the_async_sandbox_calls(pool) -> None:
    recording = RecordingPool(pool)
    env = gymnasium.make("rollgym/Shell-v0", sandbox_pool=recording)
    await areset(env, options={"task_id": "hello-file"})
    await astep(env, solver(env)([]))
    assert recording.calls and all(name.startswith("a") for name in recording.calls)
    recording.calls.clear()
    env.reset(options={"task_id": "hello-file"})
    env.step(fenced("bash", "true"))
    assert recording.calls and not any(name.startswith("a") for name in recording.calls)
    env.close()


async def test_many_sandboxed_episodes_run_at_once(pool) -> None:
    recording = RecordingPool(pool)

    async def episode(task_id: str) -> float:
        env = gymnasium.make("rollgym/PythonTests-v0", sandbox_pool=recording)
        obs, _ = await areset(env, options={"task_id": task_id})
        _, reward, terminated, _, _ = await astep(env, solver(env)(list(obs)))
        assert env.get_wrapper_attr("sandbox_s") > 0.0  # the step's sandbox time, beside info
        env.close()
        return reward if terminated else -1.0

    tasks = ["add", "gcd", "fizzbuzz", "median", "transpose", "dedupe"]
    assert await asyncio.gather(*(episode(t) for t in tasks)) == [pytest.approx(1.0)] * 6
    assert recording.most_in_flight > 1
