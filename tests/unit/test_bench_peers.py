"""bench.peers: the TRL arm's environment (on a fake exec: the in-box program run on the
host), that TRL lays out the same tokens as rollgym's codec, and the table's verdict.
The docker tier runs the environment on a real container."""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
from pathlib import Path

import gymnasium
import pytest
from gymnasium.utils import seeding

from bench.grpo_mode import steps_per_min, tokens_per_s
from bench.memory import PeakRss
from bench.peers import Row, table_lines, verdict_lines
from bench.peers_trl import GAME_OVER, GuessGame
from rollgym.envs.errors import ActionError, InfraError
from rollgym.envs.guess_number import pick_target
from rollgym.envs.guess_tool import GUESS_TOOL, guess_call, opening
from rollgym.envs.programs import Meter
from rollgym.sandboxes.config import PoolConfig
from rollgym.sandboxes.fake import FakeSandboxPool
from rollgym.trainer.evaluate import SuccessRate


class FakeExec:
    """Runs the command on the host instead of in a box, and counts the calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, argv: list[str]) -> tuple[int, str]:
        self.calls += 1
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        return done.returncode, done.stdout


@pytest.fixture(scope="module")
def pool():
    with FakeSandboxPool(PoolConfig(size=1, health_interval_s=0)) as pool:
        yield pool


def rollgym_return(pool, seed: int, actions: list[str]) -> tuple[list[str], float]:
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


def trl_return(seed: int, guesses: list[int]) -> tuple[list[str], float]:
    game = GuessGame(FakeExec(), Meter())
    game.reset(seed=seed, prompt=list(opening(1, 8)))
    replies = []
    for number in guesses:
        try:
            replies.append(game.guess(number))
        except (ActionError, ValueError) as exc:
            replies.append(str(exc))
    return replies, game.get_reward()


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("guesses", [[4, 6, 7], [9, 2, 5]])
def test_the_trl_game_plays_guess_tool_on_the_same_seed(seed, guesses, pool) -> None:
    """Same seed, same guesses: the same replies and the same reward in both arms."""
    replies, reward = rollgym_return(pool, seed, [guess_call(n) for n in guesses])
    assert trl_return(seed, guesses[: len(replies)]) == (replies, pytest.approx(reward))


def target_of(seed: int) -> int:
    """The target GuessTool hides for ``seed``."""
    return pick_target({}, seeding.np_random(seed)[0], 1, 8)


def test_after_the_game_no_guess_reaches_the_box() -> None:
    run, meter = FakeExec(), Meter()
    game = GuessGame(run, meter, max_guesses=3)
    target = target_of(0)
    game.reset(seed=0)
    assert game.guess(target) == "Correct!"
    with pytest.raises(ValueError, match=GAME_OVER):
        game.guess(target)
    game.reset(seed=0)
    for _ in range(3):
        game.guess(1 if target != 1 else 2)
    with pytest.raises(ValueError, match=GAME_OVER):
        game.guess(target)
    assert run.calls == 4 and game.get_reward() == 0.0 and meter.seconds > 0


def test_a_box_that_fails_or_lies_is_an_error_not_a_verdict() -> None:
    wrong = 1 if target_of(0) != 1 else 2
    game = GuessGame(lambda argv: (1, ""), Meter())
    game.reset(seed=0)
    with pytest.raises(RuntimeError, match="exited with 1"):
        game.guess(wrong)
    game = GuessGame(lambda argv: (0, '{"reply": "Correct!", "low": 1, "high": 1}'), Meter())
    game.reset(seed=0)
    with pytest.raises(InfraError):
        game.guess(wrong)


def test_trl_lays_out_the_tokens_rollgyms_codec_does(default_model_dir: Path) -> None:
    """The same prompt (the tool as TRL derives it from ``guess``), the same tool replies,
    and a sampled call parsed into ``guess(number)``: one warm start serves both arms."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from transformers.utils import get_json_schema
    from trl import GRPOTrainer
    from trl.chat_template_utils import parse_response

    from bench.peers_trl import grpo_config
    from rollgym.doors.trl import quiet_experimental, response_template
    from rollgym.server.conversation.codec import ChatCodec
    from rollgym.trainer.config import TrainerConfig

    assert get_json_schema(GuessGame.guess) == GUESS_TOOL.to_openai()
    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    tokenizer.response_template = response_template()
    config = TrainerConfig(output_dir=Path("unused"), total_steps=1)
    with quiet_experimental():
        grpo = GRPOTrainer(
            model=str(default_model_dir),
            args=grpo_config(config, max_completion_length=64, max_turns=3, cb=False),
            train_dataset=Dataset.from_list([{"prompt": list(opening(1, 8)), "seed": 0}]),
            processing_class=tokenizer,
            environment_factory=lambda: GuessGame(FakeExec(), Meter()),
        )
    codec = ChatCodec(tokenizer)
    grpo._batch_environments = [None]
    prompt_ids, _, _ = grpo._tokenize_prompts([list(opening(1, 8))])
    first = codec.first_prompt(list(opening(1, 8)), tools=[GUESS_TOOL.to_openai()])
    assert list(prompt_ids[0]) == first
    reply = {"role": "tool", "content": "Higher. From 5 to 8."}
    assert grpo._get_tool_suffix_ids([{**reply, "name": "guess"}]) == codec.continuation(
        [reply], stopped=True
    )
    sampled = [*codec.encode(guess_call(4)), codec.eos_id]
    parsed = parse_response(tokenizer, sampled, prefix=first, tools=grpo._env_tools[None])
    assert parsed["tool_calls"][0]["function"] == {"name": "guess", "arguments": {"number": 4}}


def row(arm: str, updates: float, rate: float = 0.5) -> Row:
    n = 200
    low, high = max(0.0, rate - 0.07), min(1.0, rate + 0.07)
    success = SuccessRate(round(rate * n), n, low, high, rate)
    return Row(arm=arm, steps=30, updates_per_min=updates, success=success, load=(1.0, 1.0))


def test_the_verdict_compares_the_best_async_arm_with_the_faster_trl_arm() -> None:
    rows = [row("trl", 4.0), row("trl-cb", 2.0), row("sync", 8.0), row("async-1", 13.0)]
    assert verdict_lines(rows)[:2] == [
        "best asynchronous rollgym arm: async-1, 3.25x trl",
        "  met     >= 3x TRL alone",
    ]
    assert verdict_lines(rows)[2].startswith("  met     its held-out success 50.0%")
    slow_and_worse = [row("trl", 4.0, 0.6), row("async-1", 10.0, 0.4)]
    assert [line.split()[0] for line in verdict_lines(slow_and_worse)[1:]] == ["NOT", "NOT"]
    assert verdict_lines([row("trl", 4.0)])[0].startswith("no verdict")


def test_the_table_shows_each_arm_against_trl_and_why_an_arm_failed() -> None:
    args = argparse.Namespace(steps=30, lr=1e-4, max_step_kl=None)
    rows = [row("trl", 4.0), Row(arm="trl-cb", error="exit code 1: MemoryError"), row("sync", 8.0)]
    lines = table_lines(rows, rows[0].success, args)
    assert "2.00x" in lines[4] and lines[3] == "trl-cb   failed: exit code 1: MemoryError"
    assert "trust region" not in lines[0]
    args.max_step_kl = 0.02
    assert table_lines(rows, rows[0].success, args)[0].endswith("rollgym's trust region 0.02")


def test_rates_run_from_the_first_steps_end_to_the_last() -> None:
    ends = [100.0, 110.0, 120.0, 130.0]
    logs = [{"completions/mean_length": 50.0, "loss": 0.1}] * 4 + [{"train_runtime": 30.0}]
    assert steps_per_min(ends) == 6.0
    assert tokens_per_s(ends, logs, batch=32) == pytest.approx(3 * 50 * 32 / 30)
    assert math.isnan(steps_per_min(ends[:1]))


def test_peak_memory_counts_this_process() -> None:
    with PeakRss(interval_s=0.01) as peak:
        pass
    assert peak.mib > 10


def test_peak_memory_counts_a_child_started_inside_the_block() -> None:
    """The descendants are found anew every ``tree_every_s``: a child that holds 200 MiB
    for a second is in the peak."""
    hold = "b = bytearray(200 * 2**20); import time; time.sleep(1.0)"
    with PeakRss(interval_s=0.01) as alone:
        pass
    with PeakRss(interval_s=0.01, tree_every_s=0.05) as peak:
        subprocess.run([sys.executable, "-c", hold], check=True)
    assert peak.mib > alone.mib + 190
