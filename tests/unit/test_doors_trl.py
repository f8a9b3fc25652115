"""``rollgym.doors.trl``: a rollgym env as TRL's environment class, on the fake pool.

Its real twin: tests/e2e/test_trl_environment_factory.py trains TRL's own GRPOTrainer
through it on Compute in Docker boxes."""

from __future__ import annotations

import pickle

import gymnasium
import pytest
from transformers.utils import get_json_schema

from rollgym.doors.trl import EPISODE_OVER, TrlEnvironments, closing_reward, tool_method
from rollgym.envs.compute import PYTHON_TOOL
from rollgym.envs.errors import ActionError, EnvLoadError
from rollgym.envs.guess_tool import GUESS_TOOL, guess_call
from rollgym.sandboxes.config import PoolConfig
from rollgym.sandboxes.fake import FakeSandboxPool


@pytest.fixture(scope="module")
def pool():
    with FakeSandboxPool(PoolConfig(size=2, health_interval_s=0)) as pool:
        yield pool


def rollgym_return(pool, seed: int, actions: list[str]) -> tuple[list[str], float]:
    """GuessTool played by rollgym's own env: its replies and its return."""
    env = gymnasium.make("rollgym/GuessTool-v0", sandbox_pool=pool)
    env.reset(seed=seed)
    replies, total = [], 0.0
    for action in actions:
        obs, reward, terminated, truncated, _ = env.step(action)
        replies.append(obs[0]["content"])
        total += reward
        if terminated or truncated:
            break
    env.close()
    return replies, total


@pytest.fixture
def guess(pool):
    with TrlEnvironments("rollgym/GuessTool-v0", sandbox_pool=pool) as environments:
        yield environments


def test_tools_are_methods_that_trl_reads_as_the_env_declares_them(guess) -> None:
    environment = guess()
    assert get_json_schema(environment.guess) == GUESS_TOOL.to_openai()
    assert type(environment).__name__ == "GuessTool"
    assert type(guess()) is type(environment)  # TRL matches get_reward's column by exact type


@pytest.mark.parametrize("seed", [0, 3])
@pytest.mark.parametrize("guesses", [[4, 6, 7], [9, 2, 5]])
def test_a_rollout_plays_the_env_as_rollgyms_runner_does(guess, pool, seed, guesses) -> None:
    replies, reward = rollgym_return(pool, seed, [guess_call(n) for n in guesses])
    environment = guess()
    environment.reset(**guess.rows([seed])[0])
    got = []
    for number in guesses[: len(replies)]:
        try:
            got.append(environment.guess(number=number))
        except ActionError as exc:  # TRL shows a raised error to the model as the reply
            got.append(str(exc))
    assert (got, environment.get_reward()) == (replies, pytest.approx(reward))
    assert environment.env_s > 0 and guess.env_s >= environment.env_s


def test_no_call_reaches_the_env_after_the_episode(guess) -> None:
    environment = guess()
    row = guess.rows([0])[0]
    environment.reset(**row)
    target = environment._env.unwrapped._target
    assert environment.guess(number=target) == "Correct!"  # terminated
    with pytest.raises(ValueError, match=EPISODE_OVER):
        environment.guess(number=target)
    environment.reset(**row)
    wrong = 1 if target != 1 else 2
    for _ in range(3):  # the turn limit: truncated
        environment.guess(number=wrong)
    with pytest.raises(ValueError, match=EPISODE_OVER):
        environment.guess(number=target)


def test_a_row_built_for_other_kwargs_fails_loudly(pool, guess) -> None:
    with TrlEnvironments("rollgym/GuessTool-v0", sandbox_pool=pool, high=16) as other:
        row = other.rows([0])[0]
    with pytest.raises(ValueError, match=r"build the rows with TrlEnvironments\.rows"):
        guess().reset(**row)


def test_the_closing_message_is_the_last_step_of_an_answer_env(pool) -> None:
    with TrlEnvironments("rollgym/Compute-v0", sandbox_pool=pool) as compute:
        environment = compute()
        assert get_json_schema(environment.python)["function"]["name"] == PYTHON_TOOL.name
        row = compute.rows([5])[0]
        environment.reset(**row)
        answer = environment._env.unwrapped.task.answer
        assert environment.python(code="print(6 * 7)").strip() == "42"
        calls = [{"role": "assistant", "content": "", "tool_calls": [{"type": "function"}]}]
        answered = [{"role": "assistant", "content": f"<answer>{answer}</answer>"}]
        assert closing_reward([calls], [environment]) == [0.0]  # ended on a call: nothing
        assert closing_reward([answered], [environment]) == [1.0]
        assert closing_reward([answered], [environment]) == [0.0]  # the episode is over
        assert environment.get_reward() == 0.0
        environment.reset(**row)
        wrong = [{"role": "assistant", "content": "no idea"}]
        assert closing_reward([wrong], [environment]) == [pytest.approx(-0.05)]
        assert closing_reward([wrong], [object()]) == [None]  # another env's rollout


def test_an_env_without_tools_is_refused_with_what_to_do() -> None:
    with pytest.raises(EnvLoadError, match=r"offers no tools.*rollgym run"):
        TrlEnvironments("rollgym/GuessNumber-v0")()


def test_a_tool_named_like_trls_own_methods_is_refused() -> None:
    reset = {"type": "function", "function": {"name": "reset", "parameters": {}}}
    with pytest.raises(EnvLoadError, match="'reset' cannot be a method"):
        tool_method(reset)


def test_the_factory_pickles_without_its_pool_and_refuses_a_given_pool(guess) -> None:
    factory = TrlEnvironments("rollgym/Compute-v0", pool_size=3, digits=5)
    copy = pickle.loads(pickle.dumps(factory))
    assert (copy.env_id, copy.env_kwargs, copy.pool_size) == (
        "rollgym/Compute-v0",
        {"digits": 5},
        3,
    )
    assert copy._pool is None and copy._made == []
    with pytest.raises(TypeError, match="give pool_size instead"):
        pickle.dumps(guess())
