"""GuessNumber: the chat contract on the simplest env, its rewards alone, oracle and demos."""

from __future__ import annotations

import gymnasium
import pytest

from rollgym.envs.errors import ActionError, EpisodeStateError, TaskNotFound
from rollgym.envs.guess_demos import GuessPolicy, demonstrations, drills, endgames
from rollgym.envs.guess_number import (
    GuessEpisode,
    GuessStep,
    GuessStepReward,
    GuessTerminalReward,
    parse_guess,
)
from rollgym.envs.messages import assistant

INFO_KEYS = {
    "failure",
    "error",
    "turn",
    "task_id",
    "step_reward",
    "terminal_reward",
}


def play(env, policy, **reset):
    obs, info = env.reset(**reset)
    history, rewards, steps = list(obs), [], []
    while True:
        action = policy(history)
        obs, reward, terminated, truncated, info = env.step(action)
        history += [assistant(action), *obs]
        rewards.append(reward)
        steps.append((terminated, truncated, info))
        if terminated or truncated:
            return history, rewards, steps


def test_reset_gives_system_and_user_messages_and_the_task_id() -> None:
    env = gymnasium.make("rollgym/GuessNumber-v0")
    obs, info = env.reset(options={"task_id": "guess-11"})
    assert [m["role"] for m in obs] == ["system", "user"]
    assert "1 to 16" in obs[1]["content"]
    assert info == {"task_id": "guess-11"}  # no wall-clock time: infos are deterministic
    with pytest.raises(TaskNotFound):
        env.reset(options={"task_id": "guess-99"})


def test_step_returns_only_the_new_feedback_with_the_contract_info() -> None:
    env = gymnasium.make("rollgym/GuessNumber-v0")
    env.reset(options={"task_id": "guess-11"})
    obs, reward, terminated, truncated, info = env.step("8")
    assert obs == ({"role": "user", "content": "Higher."},)
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info.keys() == INFO_KEYS
    assert info["failure"] is None and info["error"] is None
    assert env.get_wrapper_attr("sandbox_s") == 0.0  # no box: no sandbox time
    obs, reward, terminated, _, info = env.step("My guess is 11")
    assert obs[0]["content"] == "Correct!"
    assert terminated and reward == pytest.approx(0.95)
    assert info["terminal_reward"] == pytest.approx(0.95)


def test_turn_limit_truncates_and_never_terminates() -> None:
    env = gymnasium.make("rollgym/GuessNumber-v0", max_episode_steps=3)
    env.reset(options={"task_id": "guess-16"})
    results = [env.step("1") for _ in range(3)]
    assert [(r[2], r[3]) for r in results] == [(False, False), (False, False), (False, True)]
    assert sum(r[1] for r in results) == 0.0  # failure pays nothing


def test_rejected_messages_are_task_failures_with_feedback_and_a_penalty() -> None:
    env = gymnasium.make("rollgym/GuessNumber-v0", max_episode_steps=10)
    env.reset(options={"task_id": "guess-5"})
    for action, complaint in [("", "no number"), ("3 or 4", "2 numbers"), ("99", "Out of range")]:
        obs, reward, terminated, truncated, info = env.step(action)
        assert complaint in obs[0]["content"]
        assert (reward, terminated, truncated) == (-0.1, False, False)
        assert info["failure"] == "task" and complaint in info["error"]


def test_step_before_reset_and_after_the_end_are_errors() -> None:
    env = gymnasium.make("rollgym/GuessNumber-v0").unwrapped  # below Gymnasium's own checks
    with pytest.raises(EpisodeStateError, match="idle"):
        env.step("1")
    env.reset(options={"task_id": "guess-1"})
    env.step("1")
    with pytest.raises(EpisodeStateError, match="done"):
        env.step("1")
    env.reset()
    with pytest.raises(TypeError, match="str"):
        env.step(1)
    env.close()
    with pytest.raises(EpisodeStateError, match="closed"):
        env.reset()


def test_rewards_are_callables_that_run_alone() -> None:
    assert GuessStepReward()(GuessStep(4, "higher")) == 0.0
    assert GuessStepReward(invalid_penalty=0.3)(GuessStep(None, "invalid")) == -0.3
    assert GuessTerminalReward()(GuessEpisode(found=True, turns=1)) == 1.0
    assert GuessTerminalReward(turn_cost=0.1)(GuessEpisode(found=True, turns=5)) == pytest.approx(
        0.6
    )
    assert GuessTerminalReward()(GuessEpisode(found=False, turns=6)) == 0.0


@pytest.mark.parametrize("broken", ["raises", "nan"])
def test_a_broken_reward_callable_is_an_infrastructure_failure(broken: str) -> None:
    def reward(episode: GuessEpisode) -> float:
        if broken == "raises":
            raise RuntimeError("reward service down")
        return float("nan")

    env = gymnasium.make("rollgym/GuessNumber-v0", terminal_reward=reward)
    env.reset(options={"task_id": "guess-8"})
    _, value, terminated, truncated, info = env.step("8")
    assert (value, terminated, truncated) == (0.0, False, True)
    assert info["failure"] == "infra"
    assert "reward callable" in info["error"]
    assert info["step_reward"] is None and info["terminal_reward"] is None


def test_parse_guess_is_strict_about_ascii_integers() -> None:
    assert parse_guess(" 7 ", 1, 16) == 7
    for text in ("٣", "7.5", "1e3", "9" * 40, "-2"):
        with pytest.raises(ActionError):
            parse_guess(text, 1, 16)


def test_strict_parsing_takes_the_number_alone() -> None:
    assert parse_guess(" 7\n", 1, 16, strict=True) == 7
    assert parse_guess("lin7", 1, 16) == 7  # lenient by default: one integer anywhere
    for text in ("lin7", "I guess 7", "7.", "7 8"):
        with pytest.raises(ActionError, match="number only"):
            parse_guess(text, 1, 16, strict=True)


def test_a_strict_env_rejects_text_around_the_number() -> None:
    env = gymnasium.make("rollgym/GuessNumber-v0", low=1, high=8, strict=True)
    env.reset(seed=0, options={"task_id": "guess-3"})
    _, reward, terminated, _, _ = env.step("my guess: 3")
    assert reward < 0 and not terminated
    _, reward, terminated, _, _ = env.step("3")
    assert reward > 0 and terminated
    env.close()


def test_the_oracle_finds_every_number_within_the_turn_limit() -> None:
    env = gymnasium.make("rollgym/GuessNumber-v0")
    for target in range(1, 17):
        _, rewards, steps = play(env, GuessPolicy(), options={"task_id": f"guess-{target}"})
        assert steps[-1][0], f"oracle failed on {target}"
        assert len(steps) <= 5
        assert sum(rewards) >= 0.8


def test_noisy_play_is_valid_but_slower_and_sometimes_fails() -> None:
    env = gymnasium.make("rollgym/GuessNumber-v0")
    policy = GuessPolicy(noise=1.0, seed=3)
    turns, solved = [], 0
    for seed in range(60):
        _, _, steps = play(env, policy, seed=seed)
        assert all(info["failure"] is None for _, _, info in steps)  # every guess valid
        turns.append(len(steps))
        solved += steps[-1][0]
    oracle_turns = [len(play(env, GuessPolicy(), seed=s)[2]) for s in range(60)]
    assert sum(turns) > sum(oracle_turns)
    assert 0 < solved < 60


def test_demonstrations_are_whole_reproducible_conversations() -> None:
    clean = demonstrations(20, seed=5)
    assert clean == demonstrations(20, seed=5)
    assert clean != demonstrations(20, seed=6)
    for conversation in clean:
        roles = [m["role"] for m in conversation]
        assert roles[:2] == ["system", "user"]
        assert roles[2:] == ["assistant", "user"] * ((len(roles) - 2) // 2)
        assert conversation[-1]["content"] == "Correct!"
    noisy = demonstrations(200, seed=5, noise=0.5)
    assert sum(map(len, noisy)) > sum(map(len, demonstrations(200, seed=5)))


def test_difficulty_is_configurable() -> None:
    conversations = demonstrations(30, seed=0, low=1, high=100, max_turns=7)
    assert all("1 to 100" in c[1]["content"] for c in conversations)
    assert max(len(c) for c in conversations) <= 2 + 2 * 7
    with pytest.raises(ValueError, match="low"):
        gymnasium.make("rollgym/GuessNumber-v0", low=5, high=4)


def test_range_feedback_names_what_is_still_open() -> None:
    env = gymnasium.make("rollgym/GuessNumber-v0", low=1, high=8, feedback="range", strict=True)
    env.reset(options={"task_id": "guess-3"})
    replies = [env.step(guess)[0][0]["content"] for guess in ("6", "1", "7", "x2")]
    # 7 was already ruled out: the range stays; a rejected message changes nothing
    assert replies[:3] == ["Lower. From 1 to 5.", "Higher. From 2 to 5.", "Lower. From 2 to 5."]
    assert not replies[3].startswith(("Higher", "Lower"))
    assert env.step("3")[0][0]["content"] == "Correct!"


def test_the_oracle_reads_range_feedback_too() -> None:
    env = gymnasium.make("rollgym/GuessNumber-v0", feedback="range")
    for target in range(1, 17):
        _, _, steps = play(env, GuessPolicy(), options={"task_id": f"guess-{target}"})
        assert steps[-1][0] and len(steps) <= 5


def test_drills_train_the_last_turn_only_from_any_position() -> None:
    game = {"low": 1, "high": 8, "max_turns": 3, "env_kwargs": {"feedback": "range"}}
    conversations = drills(50, seed=1, **game)
    assert conversations == drills(50, seed=1, **game) and len(conversations) == 50
    oracle = GuessPolicy(1, 8)
    for conversation in conversations:
        moves = [i for i, m in enumerate(conversation) if m["role"] == "assistant"]
        assert len(moves) == 3
        assert [conversation[i].get("weight") for i in moves] == [0, 0, None]
        last = moves[-1]
        assert conversation[last]["content"] == oracle(conversation[:last])
    # the untrained guesses are spread over the whole range, not only the open one
    first = {c[2]["content"] for c in conversations}
    assert first == {str(n) for n in range(1, 9)}


def test_later_drills_train_every_turn_after_a_random_opening() -> None:
    game = {"low": 1, "high": 8, "max_turns": 3, "env_kwargs": {"feedback": "range"}}
    conversations = drills(60, seed=2, turns="later", **game)
    assert conversations == drills(60, seed=2, turns="later", **game) and len(conversations) == 60
    oracle, depths = GuessPolicy(1, 8), set()
    for conversation in conversations:
        moves = [i for i, m in enumerate(conversation) if m["role"] == "assistant"]
        weights = [conversation[i].get("weight") for i in moves]
        untrained = weights.count(0)
        depths.add(untrained)
        assert weights == [0] * untrained + [None] * (len(moves) - untrained)  # a prefix only
        for i in moves[untrained:]:  # every trained turn is the oracle's
            assert conversation[i]["content"] == oracle(conversation[:i])
    assert depths == {1, 2}  # the second turn is drilled too, not only the last
    with pytest.raises(ValueError, match="turns must be"):
        drills(1, turns="first", **game)  # type: ignore[arg-type]


def test_endgames_drill_every_number_alone_in_the_open_range() -> None:
    game = {"low": 1, "high": 8, "max_turns": 3, "env_kwargs": {"feedback": "range"}}
    conversations = endgames(80, seed=3, **game)
    assert conversations == endgames(80, seed=3, **game) and len(conversations) == 80
    oracle, taught = GuessPolicy(1, 8), []
    for conversation in conversations:
        moves = [i for i, m in enumerate(conversation) if m["role"] == "assistant"]
        weights = [conversation[i].get("weight") for i in moves]
        assert weights == [0] * (len(moves) - 1) + [None]  # the last guess alone is trained
        low, high = oracle.open_range(conversation[: moves[-1]])
        assert low == high == int(conversation[moves[-1]]["content"])  # one number left
        assert conversation[-1]["content"] == "Correct!"
        taught.append(low)
    assert {n: taught.count(n) for n in range(1, 9)} == dict.fromkeys(range(1, 9), 10)
    with pytest.raises(ValueError, match="no end game of 2 within 2 turns"):
        endgames(8, tries=20, **{**game, "max_turns": 2})


def test_the_warm_start_adds_endgames_when_asked_and_only_then() -> None:
    from rollgym.run.demos import GuessDemos
    from rollgym.run.warmstart import WarmStartConfig, demonstration_records

    demos = GuessDemos(
        oracle_episodes=2, imperfect_episodes=0, drill_episodes=0, endgame_episodes=0
    )
    base = WarmStartConfig(demos=demos)
    asked = base.model_copy(update={"demos": demos.model_copy(update={"endgame_episodes": 8})})
    records = demonstration_records(asked)
    assert len(records) == len(demonstration_records(base)) + 8
    last_guesses = [
        [m for m in r.messages if m.role == "assistant"][-1].content for r in records[2:]
    ]
    assert last_guesses == [str(n) for n in range(1, 9)]  # one per number, each its own end
    assert base.fingerprint() != asked.fingerprint()  # a new warm start, not a stale one
