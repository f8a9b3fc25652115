"""The run config, the held-out statistics, the warm start's token layout, the report PNG."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from test_trainer_fakes import random_group
from transformers import AutoTokenizer

from rollgym.envs.guess_demos import demonstrations
from rollgym.trainer.checkpoint import DropCounts
from rollgym.trainer.config import parse_config
from rollgym.trainer.errors import TrainerConfigError
from rollgym.trainer.evaluate import success_rate, wilson_interval
from rollgym.trainer.loop import TrainResult
from rollgym.trainer.pipeline import RunConfig
from rollgym.trainer.plot import moving_average, write_report_png
from rollgym.trainer.progress import StepRecord
from rollgym.trainer.warmstart import tokenize_conversation


def test_run_config_ties_the_job_to_the_trainer(tmp_path) -> None:
    config = RunConfig(run_dir=tmp_path)
    job = config.rollout_job()
    assert config.grpo.output_dir == tmp_path / "grpo"
    assert (job.group_size, job.groups_per_batch, job.max_staleness) == (
        config.trainer.group_size,
        config.trainer.groups_per_batch,
        config.trainer.max_staleness,
    )
    assert job.sampling.temperature == config.trainer.temperature


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"task": {"temperature": 0.7}}, "temperature"),
        ({"task": {"env_kwargs": {"low": 1, "high": 32}}}, "warmstart range"),
        ({"task": {"max_turns": 6}}, "max_turns"),
    ],
)
def test_run_config_refuses_inconsistent_settings(tmp_path, values, needle) -> None:
    with pytest.raises(TrainerConfigError, match=needle):
        parse_config(RunConfig, run_dir=tmp_path, **values)


def test_wilson_interval_brackets_the_rate_and_stays_in_bounds() -> None:
    low, high = wilson_interval(40, 100)
    assert low < 0.4 < high and high - low == pytest.approx(0.19, abs=0.01)
    assert wilson_interval(0, 50)[0] == 0.0 and wilson_interval(50, 50)[1] == 1.0
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_success_counts_terminated_positive_episodes_only() -> None:
    group = random_group(0, 4, random.Random(0))  # rewards 1, 1, 0, 0; all terminated
    rate = success_rate(group.trajectories)
    assert (rate.successes, rate.episodes) == (2, 4)
    assert rate.mean_reward == pytest.approx(0.5)


def test_warm_start_trains_on_the_guesses_and_end_of_turn_only(default_model_dir) -> None:
    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    conversation = demonstrations(1, seed=5, noise=1.0)[0]
    example = tokenize_conversation(tokenizer, conversation)
    ids, mask = example["input_ids"], example["assistant_masks"]
    guesses = [m["content"] for m in conversation if m["role"] == "assistant"]
    trained = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])
    assert trained == "".join(f"{g}<|im_end|>" for g in guesses)
    # the ids spell the chat template's rendering (up to the last guess), segment by segment
    rendered = tokenizer.apply_chat_template(conversation, tokenize=False)
    assert rendered.startswith(tokenizer.decode(ids))


def test_moving_average_and_report_png(tmp_path: Path) -> None:
    assert moving_average([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]
    records = [
        StepRecord(
            step=i,
            at=float(i),
            policy_version=i + 1,
            trajectories=8,
            reward_mean=i / 10,
            success_rate=i / 10,
            version_lag_mean=1.0,
            version_lag_max=1,
            invalid=0,
            dropped_total=0,
            wait_s=0.1,
            train_s=1.0,
            sync_s=0.1,
        )
        for i in range(1, 6)
    ]
    result = TrainResult(
        steps=5,
        policy_version=6,
        resumed_from=None,
        records=records,
        dropped=DropCounts(),
        groups_trained=10,
        trl_logs=[],
        stage_shares={s: (1.0, 2.0) for s in ("sampling", "environment", "buffer", "training")},
    )
    rate = success_rate(random_group(0, 4, random.Random(1)).trajectories)
    png = write_report_png(result, tmp_path / "r.png", rate, rate)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
