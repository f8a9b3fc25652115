"""Infrastructure failures are flagged (``failure="infra"``) or raised as ``InfraError``,
never scored as a plain reward; the box's life follows the episodes."""

from __future__ import annotations

import gymnasium
import pytest

from rollgym.envs.errors import EpisodeStateError, InfraError
from rollgym.envs.progress import ProgressStep
from rollgym.envs.scripted import fenced, solver
from rollgym.envs.tasksets import Check, ShellTask
from rollgym.sandboxes.base import SandboxDied, SandboxOOM, SandboxState
from rollgym.sandboxes.config import PoolConfig
from rollgym.sandboxes.fake import FakeSandboxPool


@pytest.fixture
def pool():
    with FakeSandboxPool(PoolConfig(size=1, health_interval_s=0, acquire_timeout_s=5)) as pool:
        yield pool


def test_a_box_that_dies_mid_step_ends_the_episode_as_an_infrastructure_failure(pool) -> None:
    env = gymnasium.make("rollgym/Shell-v0", sandbox_pool=pool)
    env.reset(options={"task_id": "make-dir"})
    # The fake's executor is the parent of the command's shell: killing it kills the box.
    obs, reward, terminated, truncated, info = env.step(fenced("bash", "kill -9 $PPID"))
    assert (obs, reward, terminated, truncated) == ((), 0.0, False, True)
    assert info["failure"] == "infra" and "SandboxDied" in info["error"]
    assert info["step_reward"] is None and info["terminal_reward"] is None
    with pytest.raises(EpisodeStateError):
        env.unwrapped.step(fenced("bash", "ls"))
    # the pool replaced the dead box: the next episode runs normally
    obs, _ = env.reset(options={"task_id": "make-dir"})
    _, reward, terminated, *_ = env.step(solver(env)(list(obs)))
    assert terminated and reward == 1.0
    env.close()


def test_no_free_box_makes_reset_raise_an_infrastructure_error(pool) -> None:
    holder = gymnasium.make("rollgym/Shell-v0", sandbox_pool=pool)
    holder.reset(options={"task_id": "make-dir"})
    waiter = gymnasium.make("rollgym/Shell-v0", sandbox_pool=pool, acquire_timeout_s=0.2)
    with pytest.raises(InfraError, match="PoolTimeout"):
        waiter.reset()
    holder.close()  # gives the box back...
    waiter.reset(options={"task_id": "make-dir"})  # ...so the waiter gets it
    waiter.close()
    assert pool.status().leased == 0


def test_a_task_whose_setup_fails_raises_on_reset(pool) -> None:
    broken = ShellTask(
        id="broken",
        prompt="p",
        setup="exit 3",
        checks=(Check(describe="d", command="true"),),
        solution="true",
    )
    env = gymnasium.make("rollgym/Shell-v0", sandbox_pool=pool, tasks=[broken])
    with pytest.raises(InfraError, match="setup of task broken failed"):
        env.reset()
    env.close()


def test_a_crashing_reward_in_a_sandboxed_env_is_flagged(pool) -> None:
    def reward(step: ProgressStep) -> float:
        raise KeyError("scores table missing")

    env = gymnasium.make("rollgym/PythonTests-v0", sandbox_pool=pool, step_reward=reward)
    obs, _ = env.reset(options={"task_id": "add"})
    obs, value, terminated, truncated, info = env.step(solver(env)(list(obs)))
    assert (value, terminated, truncated) == (0.0, False, True)
    assert info["failure"] == "infra" and "scores table missing" in info["error"]
    assert obs[0]["content"].endswith("All 3 hidden tests passed.")  # what it saw is kept
    env.close()


def test_each_reset_takes_a_fresh_box_and_close_gives_it_back(pool) -> None:
    env = gymnasium.make("rollgym/Shell-v0", sandbox_pool=pool)
    env.reset(options={"task_id": "make-dir"})
    env.step(fenced("bash", "touch leftover"))
    env.reset(options={"task_id": "make-dir"})
    obs, *_ = env.step(fenced("bash", "ls -A"))
    assert "leftover" not in obs[0]["content"]
    assert pool.status().leased == 1
    env.close()
    env.close()  # closing twice is fine
    assert pool.status().leased == 0


class OneCallBox:
    """A stand-in box whose shell call fails with ``error``; no check ever holds."""

    def __init__(self, error: Exception):
        self.error, self.state = error, SandboxState.READY

    def run_shell(self, command: str, *, timeout=None, stdin=None):
        raise self.error

    def verify(self, checks):
        return (False,) * len(checks)


class OneBoxPool:
    def __init__(self, box):
        self.box = box

    def acquire(self, *, timeout=None):
        return self.box

    def release(self, box) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.mark.parametrize(
    ("error", "failure"),
    [
        (SandboxOOM("the shell call was killed for using too much memory"), "task"),
        (SandboxDied("sandbox x stopped answering"), "infra"),
    ],
)
def test_who_caused_a_failure_decides_its_kind(error: Exception, failure: str) -> None:
    # An OOM kill is the agent's doing (the box lives on); a box that died is not.
    env = gymnasium.make("rollgym/Shell-v0", sandbox_pool=OneBoxPool(OneCallBox(error)))
    env.reset(options={"task_id": "make-dir"})
    obs, reward, terminated, truncated, info = env.step(
        fenced("bash", "python3 -c 'x = [0] * 10**10'")
    )
    assert info["failure"] == failure and not terminated
    if failure == "task":
        assert "ran out of memory" in obs[0]["content"]
        assert (reward, truncated) == (0.0, False)
    else:
        assert (obs, reward, truncated) == ((), 0.0, True)
