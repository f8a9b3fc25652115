"""reasoning-gym's tasks served unchanged as ``reasoning_gym/<task>`` (the adapter)."""

from __future__ import annotations

import subprocess
import sys

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

from rollgym import envs
from rollgym.envs import reasoning_gym
from rollgym.envs.aio import areset
from rollgym.envs.reasoning_gym import NOT_SERVED, task_names

envs.load_user_envs()  # the package's own rollgym.envs entry point registers the tasks


def test_the_entry_point_registers_every_task_but_the_unserved() -> None:
    registered = {
        k.removeprefix("reasoning_gym/")
        for k in gymnasium.registry
        if k.startswith("reasoning_gym/")
    }
    assert registered == set(task_names()) and len(registered) > 100
    assert not registered & set(NOT_SERVED)


@pytest.mark.parametrize("task", task_names())
def test_check_env_on_every_task(task: str) -> None:
    env = gymnasium.make(f"reasoning_gym/{task}", size=50)
    try:
        check_env(env.unwrapped)
    finally:
        env.close()


def chain_sum(**kwargs):
    return envs.make("reasoning_gym/chain_sum", config={"min_terms": 2, "max_terms": 2}, **kwargs)


def test_a_seed_poses_that_item_and_its_answer_scores_one() -> None:
    env = chain_sum()
    obs, info = env.reset(seed=3)
    assert info["task_id"] == "chain_sum-3"
    assert [m["role"] for m in obs] == ["system", "user"] and "<answer>" in obs[0]["content"]
    entry = reasoning_gym._dataset("chain_sum", 0, 100_000, '{"max_terms": 2, "min_terms": 2}')[3]
    assert entry["question"] == obs[1]["content"]
    _, reward, terminated, truncated, _ = env.step(f"I think <answer>{entry['answer']}</answer>")
    assert (reward, terminated, truncated) == (1.0, True, False)
    env.reset(seed=3)
    assert env.step(entry["answer"])[1] == 1.0  # no tags: the whole message is the answer
    env.reset(seed=3)
    assert env.step("<answer>nonsense</answer>")[1] == 0.0


async def test_the_async_reset_poses_the_seeds_item_too() -> None:
    _, info = await areset(chain_sum(), seed=5)
    assert info["task_id"] == "chain_sum-5"


def test_task_ids_pick_items_and_unknown_ones_are_refused() -> None:
    env = chain_sum(size=10)
    assert env.reset(options={"task_id": "chain_sum-9"})[1]["task_id"] == "chain_sum-9"
    for bad in ("chain_sum-10", "gcd-1", "chain_sum-x"):
        with pytest.raises(envs.TaskNotFound):
            env.reset(options={"task_id": bad})


def test_an_answer_the_scorer_cannot_parse_is_wrong_not_a_crash() -> None:
    env = envs.make("reasoning_gym/prime_factorization")
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step("<answer>ק🚀</answer>")
    assert (reward, terminated, info["failure"]) == (0.0, True, None)


def test_threads_that_make_the_first_envs_at_once_all_find_the_task() -> None:
    """The server makes envs in threads; the first ones import reasoning-gym together."""
    probe = (
        "import concurrent.futures\n"
        "from rollgym import envs\n"
        "def make(_):\n"
        "    try:\n"
        "        return envs.make('reasoning_gym/chain_sum').unwrapped.task\n"
        "    except envs.EnvLoadError as exc:\n"
        "        return str(exc)\n"
        "with concurrent.futures.ThreadPoolExecutor(16) as pool:\n"
        "    print(sorted(set(pool.map(make, range(16)))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    assert out.strip() == "['chain_sum']"
