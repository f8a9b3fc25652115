"""GuessTool on the fake pool: GuessNumber's game and words, each verdict computed by the
program in the box, the reward judged on the host (its real twin: tests/docker)."""

from __future__ import annotations

import gymnasium
import pytest

from rollgym.envs.errors import InfraError
from rollgym.envs.guess_tool import guess_call, read_reply
from rollgym.envs.scripted import tool_call
from rollgym.sandboxes.config import PoolConfig
from rollgym.sandboxes.fake import FakeSandboxPool


@pytest.fixture(scope="module")
def pool():
    with FakeSandboxPool(PoolConfig(size=1, health_interval_s=0)) as pool:
        yield pool


@pytest.fixture
def env(pool):
    env = gymnasium.make("rollgym/GuessTool-v0", sandbox_pool=pool)
    yield env
    env.close()


@pytest.mark.parametrize("target", [1, 3, 6, 8])
def test_every_verdict_is_guess_numbers_from_the_box(target: int, env) -> None:
    plain = gymnasium.make(
        "rollgym/GuessNumber-v0", low=1, high=8, feedback="range", max_episode_steps=3
    )
    task = {"task_id": f"guess-{target}"}
    assert env.reset(options=task)[0][1] == plain.reset(options=task)[0][1]
    for guess in (4, 2, 7):
        obs, reward, terminated, truncated, info = env.step(guess_call(guess))
        expected = plain.step(str(guess))
        assert obs == ({"role": "tool", "content": expected[0][0]["content"]},)
        assert (reward, terminated, truncated) == expected[1:4]
        assert info["failure"] is None and env.get_wrapper_attr("sandbox_s") > 0
        if terminated or truncated:
            break


def test_finding_the_number_ends_the_episode_with_the_turn_discounted_reward(env) -> None:
    env.reset(options={"task_id": "guess-6"})
    assert env.step(guess_call(4))[1:3] == (0.0, False)
    obs, reward, terminated, _, _ = env.step(guess_call(6))
    assert obs[0]["content"] == "Correct!" and terminated and reward == pytest.approx(0.95)


@pytest.mark.parametrize(
    ("action", "feedback"),
    [
        ("5", "Call the guess tool once"),
        (guess_call(2) + guess_call(3), "Call the guess tool once"),
        (guess_call(9), "Out of range: pick a number from 1 to 8."),
        (tool_call("python", {"code": "1"}), "unknown tool 'python'"),
        (tool_call("guess", {"number": "five"}), "Bad arguments for tool 'guess'"),
    ],
)
def test_a_rejected_message_is_told_why_and_costs_the_penalty(action, feedback, env) -> None:
    env.reset(options={"task_id": "guess-6"})
    obs, reward, terminated, _, info = env.step(action)
    assert obs[0]["role"] == "user" and feedback in obs[0]["content"]
    assert (reward, terminated, info["failure"]) == (-0.1, False, "task")
    assert env.get_wrapper_attr("sandbox_s") == 0.0  # nothing reached the box


def test_a_reply_the_host_cannot_trust_is_an_infrastructure_failure() -> None:
    assert read_reply('{"reply": "Lower. From 1 to 4.", "low": 1, "high": 4}', 5, 3).high == 4
    with pytest.raises(InfraError, match="answered"):
        read_reply("Traceback ...", 5, 3)
    with pytest.raises(InfraError, match="the target is 3"):
        read_reply('{"reply": "Correct!", "low": 5, "high": 5}', 5, 3)
