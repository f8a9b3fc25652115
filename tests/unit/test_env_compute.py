"""Compute on the fake pool: tasks from the seed, answers judged on the host, the
demonstrations exactly what the env shows, the no-tool baseline (real twin: tests/docker)."""

from __future__ import annotations

import gymnasium
import pytest
from gymnasium.utils import seeding

from rollgym.envs.compute import WITH_TOOL, WITHOUT_TOOL
from rollgym.envs.compute_demos import (
    copies,
    demonstrations,
    drills,
    python_call,
    solved_tasks,
)
from rollgym.envs.compute_tasks import KINDS, episode_task
from rollgym.envs.errors import EnvLoadError
from rollgym.envs.scripted import solver
from rollgym.run.demos import DEMO_SEEDS
from rollgym.sandboxes.config import PoolConfig
from rollgym.sandboxes.fake import FakeSandboxPool
from rollgym.trainer.evaluate import held_out_seeds


@pytest.fixture(scope="module")
def pool():
    with FakeSandboxPool(PoolConfig(size=1, health_interval_s=0)) as pool:
        yield pool


def play(env, policy, seed: int) -> tuple[list[dict[str, str]], float, dict]:
    """One episode: the messages (opening included), its return, the last info."""
    obs, _ = env.reset(seed=seed)
    history, total = list(obs), 0.0
    while True:
        action = policy(history)
        obs, reward, terminated, truncated, info = env.step(action)
        history += [{"role": "assistant", "content": action}, *obs]
        total += reward
        if terminated or truncated:
            return history, total, info


@pytest.mark.parametrize("kind", KINDS)
def test_the_oracle_earns_the_reward_and_plays_what_the_demonstrations_show(pool, kind) -> None:
    env = gymnasium.make("rollgym/Compute-v0", sandbox_pool=pool, kinds=[kind])
    for seed in range(3):
        env.reset(seed=seed)
        history, total, info = play(env, solver(env), seed)
        assert total == 1.0 and info["failure"] is None
        solved = env.unwrapped.solved
        [demo] = demonstrations(1, seed=0, direct_share=0.0, kinds=[kind])
        # the same layout: the demo of this very task, message for message
        expected = [*_demo_of(solved)]
        assert history[:-1] == expected  # the env's last word ("Correct.") is never trained
        assert [m["role"] for m in demo] == [m["role"] for m in expected]
    env.close()


def _demo_of(solved) -> list[dict[str, str]]:
    from rollgym.envs.compute_demos import answer
    from rollgym.envs.tool_use import user_question

    messages = [{"role": "system", "content": WITH_TOOL}, dict(user_question(solved.task))]
    for code, output in zip(solved.codes, solved.outputs, strict=True):
        messages += [
            {"role": "assistant", "content": python_call(code)},
            {"role": "tool", "content": output},
        ]
    return [*messages, {"role": "assistant", "content": answer(solved)}]


def test_a_seed_gives_one_task_and_seeds_give_different_ones(pool) -> None:
    env = gymnasium.make("rollgym/Compute-v0", sandbox_pool=pool)
    questions = []
    for seed in (5, 5, 6, 7):
        obs, _ = env.reset(seed=seed)
        questions.append(obs[1]["content"])
    assert questions[0] == questions[1] and len(set(questions)) == 3
    env.close()


def test_a_wrong_answer_ends_the_episode_with_nothing(pool) -> None:
    env = gymnasium.make("rollgym/Compute-v0", sandbox_pool=pool, kinds=["mul"])
    env.reset(seed=1)
    obs, reward, terminated, truncated, info = env.step("<answer>12</answer>")
    assert (reward, terminated, truncated) == (0.0, True, False)
    assert info["failure"] == "task" and obs[0]["content"] == "Wrong answer."
    env.close()


def test_without_the_tool_the_prompt_offers_none_and_a_call_is_refused(pool) -> None:
    env = gymnasium.make("rollgym/Compute-v0", sandbox_pool=pool, tool=False)
    obs, _ = env.reset(seed=2)
    assert env.unwrapped.tools == [] and obs[0]["content"] == WITHOUT_TOOL
    obs, reward, terminated, _, info = env.step(python_call("print(1)"))
    assert info["failure"] == "task" and "unknown tool 'python'" in obs[0]["content"]
    assert reward < 0 and not terminated
    env.close()


@pytest.mark.parametrize(
    "kwargs", [{"kinds": []}, {"kinds": ["div"]}, {"digits": 1}, {"numbers": 0}]
)
def test_bad_knobs_are_refused_with_what_is_allowed(kwargs) -> None:
    with pytest.raises(EnvLoadError, match="must be"):
        gymnasium.make("rollgym/Compute-v0", **kwargs)


def test_demonstrations_answer_without_the_tool_at_the_asked_share() -> None:
    plays = demonstrations(400, seed=0, direct_share=0.5)
    direct = [p for p in plays if len(p) == 3]
    assert 160 <= len(direct) <= 240
    assert all(p[2]["content"].startswith("<answer>") for p in direct)
    assert all(p[2]["role"] == "assistant" and p[3]["role"] == "tool" for p in plays if len(p) > 3)


def test_drills_are_short_and_train_a_call_or_an_answer_only() -> None:
    made = drills(4, seed=0, kinds=["add"])
    assert [m["role"] for m in made[0]] == ["user", "assistant"]
    assert [m.get("weight") for m in made[1] if m["role"] == "assistant"] == [0, None]
    assert made[1][-1]["content"] == f"<answer>{int(made[1][2]['content'])}</answer>"


def test_copies_answer_with_their_messages_first_characters_and_know_nothing_of_the_task():
    made = copies(500, seed=3)
    assert made == copies(500, seed=3) and made != copies(500, seed=4)
    for user, assistant in made:
        assert (user["role"], assistant["role"]) == ("user", "assistant")
        target = assistant["content"]
        assert 3 <= len(target) <= 12 and user["content"].startswith(target)
        assert "<" not in user["content"] + target  # no call, no answer tag: generic
    digits_only = sum(a["content"].isdigit() for _, a in made)
    assert 300 <= digits_only <= 400  # 70% drawn from digits alone


def test_compute_demos_make_the_asked_copies_and_drills_per_seed() -> None:
    from rollgym.run.demos import ComputeDemos

    demos = ComputeDemos(episodes=4, copies=6, drills=2)
    assert len(demos.copy_records(0)) == 6 and len(demos.drill_records(0)) == 2
    assert demos.copy_records(0) != demos.copy_records(1)  # a run's seed, its own copies
    assert ComputeDemos(copies=0).copy_records(0) == []


def test_held_out_tasks_are_none_of_the_demonstrations_or_training_tasks() -> None:
    """Seeds apart, and the tasks too: none of 200 held-out tasks is among the first run's
    3,000 demonstrations or 1,000 training tasks (a task's id hashes its question and files)."""

    def task_id(seed: int) -> str:
        return episode_task(seeding.np_random(seed)[0]).task.id  # as reset(seed=...) draws it

    held_out = {task_id(s) for s in held_out_seeds(200)}
    seen = {task_id(s) for s in range(1000)}
    seen |= {solved.task.id for solved in solved_tasks(3000, seed=DEMO_SEEDS)}
    assert len(held_out) == 200 and not held_out & seen
