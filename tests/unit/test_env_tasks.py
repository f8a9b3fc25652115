"""Every shipped task is solvable: the scripted solver gets full reward on every task of
every env, and a wrong policy gets less (this proves the checkers). Sandboxed envs run on
the fake pool here; tests/docker/test_env_docker.py repeats this on real containers."""

from __future__ import annotations

import gymnasium
import pytest

from rollgym.envs.scripted import fenced, solver
from rollgym.envs.tasksets import PythonTask, ShellTask, ToolTask, shipped_tasks
from rollgym.sandboxes.config import PoolConfig
from rollgym.sandboxes.fake import FakeSandboxPool


@pytest.fixture(scope="module")
def pool():
    with FakeSandboxPool(PoolConfig(size=2, health_interval_s=0)) as pool:
        yield pool


def episode_return(env, task_id: str, policy_for) -> tuple[float, bool]:
    obs, _ = env.reset(options={"task_id": task_id})
    policy, history, total = policy_for(env), list(obs), 0.0
    while True:
        action = policy(history)
        obs, reward, terminated, truncated, info = env.step(action)
        assert info["failure"] != "infra", info["error"]
        history += [{"role": "assistant", "content": action}, *obs]
        total += reward
        if terminated or truncated:
            return total, terminated


def wrong_python(env):
    name = env.unwrapped.task.signature.split("(")[0].removeprefix("def ")
    return lambda history: fenced("python", f"def {name}(*args, **kwargs):\n    return None")


def test_shipped_task_sets_have_the_promised_sizes() -> None:
    assert len(shipped_tasks(PythonTask, "python_tests")) >= 30
    assert len(shipped_tasks(ShellTask, "shell")) >= 20
    assert len(shipped_tasks(ToolTask, "tool_use")) >= 20


@pytest.mark.parametrize("task", shipped_tasks(PythonTask, "python_tests"), ids=lambda t: t.id)
def test_python_tests_task_is_solvable_and_checked(task: PythonTask, pool) -> None:
    env = gymnasium.make("rollgym/PythonTests-v0", sandbox_pool=pool, max_episode_steps=2)
    assert episode_return(env, task.id, solver) == (pytest.approx(1.0), True)
    total, solved = episode_return(env, task.id, wrong_python)
    assert total < 1.0 and not solved
    env.close()


@pytest.mark.parametrize("task", shipped_tasks(ShellTask, "shell"), ids=lambda t: t.id)
def test_shell_task_is_solvable_and_checked(task: ShellTask, pool) -> None:
    env = gymnasium.make("rollgym/Shell-v0", sandbox_pool=pool, max_episode_steps=2)
    assert episode_return(env, task.id, solver) == (pytest.approx(1.0), True)
    looker = lambda env: lambda history: fenced("bash", "ls -la; cat *.txt 2>/dev/null")  # noqa: E731
    assert episode_return(env, task.id, looker) == (0.0, False)
    env.close()


@pytest.mark.parametrize("task", shipped_tasks(ToolTask, "tool_use"), ids=lambda t: t.id)
def test_tool_use_task_is_solvable_and_checked(task: ToolTask, pool) -> None:
    env = gymnasium.make("rollgym/ToolUse-v0", sandbox_pool=pool)
    assert episode_return(env, task.id, solver) == (pytest.approx(1.0), True)
    guesser = lambda env: lambda history: "<answer>I do not know</answer>"  # noqa: E731
    assert episode_return(env, task.id, guesser) == (0.0, True)
    env.close()


def test_every_guess_number_task_is_solved_by_the_oracle_and_not_by_a_wrong_policy() -> None:
    env = gymnasium.make("rollgym/GuessNumber-v0")
    for task_id in env.unwrapped.task_ids():
        total, solved = episode_return(env, task_id, solver)
        assert solved and total >= 0.8
        assert episode_return(env, task_id, lambda env: lambda history: "0") == (
            pytest.approx(-0.6),
            False,
        )
