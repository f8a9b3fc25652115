"""The sandboxed envs on real containers (``DockerSandboxPool``): registry conformance,
every task solvable and checked, sandbox-side bad actions, infrastructure failures, many
episodes at once, and the pool an env makes for itself. The unit tier runs the same
checks on the fake pool."""

from __future__ import annotations

import asyncio

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

from rollgym.envs.aio import areset, astep
from rollgym.envs.scripted import fenced, solver, tool_call
from rollgym.envs.tasksets import PythonTask, ShellTask, ToolTask, shipped_tasks
from rollgym.sandboxes.config import PoolConfig
from rollgym.sandboxes.docker import DockerSandboxPool
from rollgym.sandboxes.docker.provider import LABEL_POOL

ROLLGYM_IDS = sorted(env_id for env_id in gymnasium.registry if env_id.startswith("rollgym/"))
SANDBOXED = [
    "rollgym/Compute-v0",
    "rollgym/GuessTool-v0",
    "rollgym/PythonTests-v0",
    "rollgym/Shell-v0",
    "rollgym/ToolUse-v0",
]


@pytest.fixture(scope="module")
def pool():
    with DockerSandboxPool(PoolConfig(size=3, health_interval_s=0)) as pool:
        yield pool


def make(env_id: str, pool, **kwargs):
    if env_id in SANDBOXED:
        kwargs["sandbox_pool"] = pool
    return gymnasium.make(env_id, **kwargs)


def run_episode(env, task_id: str, policy_for) -> tuple[float, bool]:
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


# --- conformance ----------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", ROLLGYM_IDS)
def test_check_env_on_real_containers(env_id: str, pool, docker_client) -> None:
    env = make(env_id, pool)
    try:
        check_env(env.unwrapped)
    finally:
        env.close()


@pytest.mark.parametrize("env_id", ROLLGYM_IDS)
def test_seeded_rollouts_are_deterministic_on_real_containers(env_id: str, pool) -> None:
    def rollout(seed: int) -> list:
        env = make(env_id, pool, max_episode_steps=5)
        env.action_space.seed(seed)
        obs, info = env.reset(seed=seed)
        history, trace = list(obs), [obs, info["task_id"]]
        for turn in range(4):
            action = env.action_space.sample() if turn % 2 == 0 else solver(env)(history)
            obs, reward, terminated, truncated, info = env.step(action)
            history += [{"role": "assistant", "content": action}, *obs]
            trace.append(
                (
                    obs,
                    reward,
                    terminated,
                    truncated,
                    info,
                )
            )
            if terminated or truncated:
                break
        env.close()
        return trace

    assert rollout(3) == rollout(3)


# --- every task solvable, checkers tell right from wrong -------------------------------------


def wrong_python(env):
    name = env.unwrapped.task.signature.split("(")[0].removeprefix("def ")
    return lambda history: fenced("python", f"def {name}(*args, **kwargs):\n    return None")


@pytest.mark.parametrize("task", shipped_tasks(PythonTask, "python_tests"), ids=lambda t: t.id)
def test_python_tests_task_on_real_containers(task: PythonTask, pool) -> None:
    env = make("rollgym/PythonTests-v0", pool, max_episode_steps=2)
    assert run_episode(env, task.id, solver) == (pytest.approx(1.0), True)
    total, solved = run_episode(env, task.id, wrong_python)
    assert total < 1.0 and not solved
    env.close()


@pytest.mark.parametrize("task", shipped_tasks(ShellTask, "shell"), ids=lambda t: t.id)
def test_shell_task_on_real_containers(task: ShellTask, pool) -> None:
    env = make("rollgym/Shell-v0", pool, max_episode_steps=2)
    assert run_episode(env, task.id, solver) == (pytest.approx(1.0), True)
    looker = lambda env: lambda history: fenced("bash", "ls -la; cat *.txt 2>/dev/null")  # noqa: E731
    assert run_episode(env, task.id, looker) == (0.0, False)
    env.close()


@pytest.mark.parametrize("task", shipped_tasks(ToolTask, "tool_use"), ids=lambda t: t.id)
def test_tool_use_task_on_real_containers(task: ToolTask, pool) -> None:
    env = make("rollgym/ToolUse-v0", pool)
    assert run_episode(env, task.id, solver) == (pytest.approx(1.0), True)
    guesser = lambda env: lambda history: "<answer>I do not know</answer>"  # noqa: E731
    assert run_episode(env, task.id, guesser) == (0.0, True)
    env.close()


# --- bad actions that reach the box ----------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("yes hello | head -c 3000000", "more characters cut"),
        ("head -c 4000 /dev/urandom", "exit code 0"),
        ("printf '\\xff\\xfe\\x00bad\\x1b[31m'; echo", "bad"),
        ("echo '‮‏ e\u0301 😀 𝔘𝔫𝔦'", "😀"),
        ("cat /no/such/file", "exit code 1"),
    ],
)
def test_sandbox_output_comes_back_clean_and_bounded(command: str, expected: str, pool) -> None:
    env = make("rollgym/Shell-v0", pool)
    env.reset(options={"task_id": "make-dir"})
    obs, reward, terminated, truncated, info = env.step(fenced("bash", command))
    assert obs in env.observation_space
    text = obs[0]["content"]
    assert expected in text and len(text) <= 2_200
    assert "\x00" not in text and "\x1b" not in text
    text.encode("utf-8")
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info["failure"] in (None, "task")
    env.close()


def test_a_command_past_its_timeout_is_the_agents_failure(pool) -> None:
    env = make("rollgym/Shell-v0", pool, command_timeout_s=1.0)
    env.reset(options={"task_id": "make-dir"})
    obs, reward, terminated, truncated, info = env.step(fenced("bash", "sleep 60"))
    assert "timed out after 1 s" in obs[0]["content"]
    assert (reward, terminated, truncated, info["failure"]) == (0.0, False, False, "task")
    _, reward, terminated, *_ = env.step(fenced("bash", "mkdir reports"))
    assert terminated and reward == 1.0
    env.close()


def test_a_memory_hog_is_the_agents_failure_and_the_episode_goes_on(pool) -> None:
    # The OOM killer takes the agent's process, never the executor: the box lives on, and
    # the agent cannot make a losing episode vanish from training by blowing up its box.
    env = make("rollgym/Shell-v0", pool)
    env.reset(options={"task_id": "make-dir"})
    hog = "python3 -c \"x = bytearray(2 * 1024 ** 3); print('survived')\""
    obs, reward, terminated, truncated, info = env.step(fenced("bash", hog))
    assert "ran out of memory" in obs[0]["content"]
    assert (reward, terminated, truncated, info["failure"]) == (0.0, False, False, "task")
    _, reward, terminated, *_ = env.step(fenced("bash", "mkdir reports"))
    assert terminated and reward == 1.0
    env.close()


# --- infrastructure failures ------------------------------------------------------------------


def test_a_container_killed_from_outside_is_an_infrastructure_failure(docker_client) -> None:
    with DockerSandboxPool(PoolConfig(size=1, health_interval_s=0)) as own_pool:
        env = make("rollgym/Shell-v0", own_pool)
        env.reset(options={"task_id": "make-dir"})
        for container in docker_client.containers.list(
            filters={"label": f"{LABEL_POOL}={own_pool.pool_id}"}
        ):
            container.kill()
        obs, reward, terminated, truncated, info = env.step(fenced("bash", "mkdir reports"))
        assert (obs, reward, terminated, truncated) == ((), 0.0, False, True)
        assert info["failure"] == "infra" and info["step_reward"] is None
        obs, _ = env.reset(options={"task_id": "make-dir"})  # a replacement box
        _, reward, terminated, *_ = env.step(solver(env)(list(obs)))
        assert terminated and reward == 1.0
        env.close()


def test_an_env_without_a_pool_makes_its_own_and_closes_it(docker_client) -> None:
    env = gymnasium.make("rollgym/Shell-v0")
    assert env.unwrapped.sandbox_pool is None  # nothing started before the first reset
    obs, _ = env.reset(options={"task_id": "hello-file"})
    pool_id = env.unwrapped.sandbox_pool.pool_id
    label = {"label": f"{LABEL_POOL}={pool_id}"}
    assert docker_client.containers.list(filters=label)
    _, reward, terminated, *_ = env.step(solver(env)(list(obs)))
    assert terminated and reward == 1.0
    env.close()
    assert docker_client.containers.list(all=True, filters=label) == []


# --- many episodes at once ------------------------------------------------------------------


async def test_many_episodes_at_once_on_real_containers(pool) -> None:
    async def episode(env_id: str, task_id: str) -> float:
        env = make(env_id, pool)
        obs, _ = await areset(env, options={"task_id": task_id})
        history, total = list(obs), 0.0
        policy = solver(env)
        while True:
            action = policy(history)
            obs, reward, terminated, truncated, info = await astep(env, action)
            assert info["failure"] is None, info["error"]
            history += [{"role": "assistant", "content": action}, *obs]
            total += reward
            if terminated or truncated:
                env.close()
                return total

    jobs = [
        episode("rollgym/ToolUse-v0", "csv-average"),
        episode("rollgym/ToolUse-v0", "find-needle"),
        episode("rollgym/Shell-v0", "make-archive"),
        episode("rollgym/Shell-v0", "symlink"),
        episode("rollgym/PythonTests-v0", "roman-to-int"),
        episode("rollgym/PythonTests-v0", "balanced-brackets"),
    ]
    assert await asyncio.gather(*jobs) == [pytest.approx(1.0)] * 6


def test_tool_calls_reach_the_box(pool) -> None:
    env = make("rollgym/ToolUse-v0", pool)
    env.reset(options={"task_id": "power-of-two"})
    obs, *_ = env.step(
        tool_call("python", {"code": "import os; print(os.getcwd(), os.getuid())"})
        + tool_call("write_file", {"path": "notes/a.txt", "content": "hi"})
        + tool_call("list_files", {"path": "notes"})
        + tool_call("read_file", {"path": "/etc/hostname-does-not-exist"})
    )
    assert [m["role"] for m in obs] == ["tool"] * 4
    assert obs[0]["content"] == "/work 61000\n"
    assert obs[2]["content"] == "a.txt\n"
    assert obs[3]["content"].startswith("error: read_file")
    env.close()
