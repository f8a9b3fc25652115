"""Every shipped task is solvable: the scripted solver gets full reward on every task of
every env, and a wrong policy gets less (this proves the checkers). Sandboxed envs run on
the fake pool here; tests/docker/test_env_docker.py repeats this on real containers."""

from __future__ import annotations

import gymnasium
import pytest

from rollgym.envs.errors import EnvLoadError
from rollgym.envs.scripted import fenced, solver
from rollgym.envs.tasksets import PythonTask, ShellTask, ToolTask, load_tasks, shipped_tasks
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


def test_python_tests_shows_its_examples_and_only_counts_its_hidden_tests(pool) -> None:
    """Public examples: in the prompt with their values, each failure described. Hidden
    tests: the reward, as a count; no call of theirs, no expected value ever shown."""
    env = gymnasium.make("rollgym/PythonTests-v0", sandbox_pool=pool)
    obs, _ = env.reset(options={"task_id": "add"})
    task = env.unwrapped.task
    assert task.examples == (("add(2, 3)", "5"),) and ">>> add(2, 3)\n5" in obs[1]["content"]
    almost = "def add(a, b):\n    return a + b if (a, b) != (0, 0) else 1"  # fails one hidden
    obs, reward, terminated, _, info = env.step(fenced("python", almost))
    assert obs[0]["content"] == "Examples: 1 of 1 passed.\n2 of 3 hidden tests passed."
    assert reward == pytest.approx(2 / 3) and not terminated
    assert info["error"] == "2 of 3 hidden tests passed"
    obs, *_ = env.step(fenced("python", "def add(a, b):\n    return 7"))
    assert obs[0]["content"] == (
        "Examples: 0 of 1 passed.\n- add(2, 3) returned 7, expected 5\n0 of 3 hidden tests passed."
    )
    obs, reward, terminated, *_ = env.step(fenced("python", task.solution))
    assert obs[0]["content"] == "Examples: 1 of 1 passed.\nAll 3 hidden tests passed."
    assert terminated and reward == pytest.approx(1 / 3)
    env.close()


def test_a_task_file_without_examples_still_loads_with_every_test_hidden(tmp_path, pool) -> None:
    old = tmp_path / "old.jsonl"
    old.write_text(
        '{"id": "double", "prompt": "Double n.", "signature": "def double(n: int) -> int:", '
        '"tests": [["double(2)", "4"], ["double(-1)", "-2"]], "solution": "def double(n): '
        'return 2 * n"}\n'
    )
    [task] = load_tasks(PythonTask, old)
    assert task.examples == () and len(task.tests) == 2
    env = gymnasium.make("rollgym/PythonTests-v0", sandbox_pool=pool, task_file=str(old))
    env.reset()
    obs, *_ = env.step(fenced("python", "def double(n):\n    return 3"))
    assert obs[0]["content"] == "0 of 2 hidden tests passed."
    env.close()
    both = old.read_text().replace('"tests"', '"examples": [["double(2)", "4"]], "tests"')
    old.write_text(both)
    with pytest.raises(EnvLoadError, match="cannot also be a public example"):
        load_tasks(PythonTask, old)


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
