"""The run config, the held-out statistics, the warm start's token layout, the report PNG."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest
from trainer_fakes import random_group

from rollgym.contract.wire import SamplingSettings
from rollgym.engine.fake import FakeEngine
from rollgym.envs.guess_demos import demonstrations
from rollgym.run.pipeline import RunConfig
from rollgym.run.plot import moving_average, write_report_png
from rollgym.run.warmstart import tokenize_conversation
from rollgym.server.conversation.codec import ChatCodec
from rollgym.server.rollout.environments import RegistryEnvs
from rollgym.server.rollout.episode import EpisodeRunner, EpisodeSpec
from rollgym.trainer.checkpoint import DropCounts
from rollgym.trainer.config import parse_config
from rollgym.trainer.errors import TrainerConfigError
from rollgym.trainer.evaluate import success_rate, wilson_interval
from rollgym.trainer.loop import TrainResult
from rollgym.trainer.online_eval import OnlinePoint
from rollgym.trainer.progress import StepRecord


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
        ({"task": {"env_kwargs": {"low": 1, "high": 32}}}, "same game"),
        ({"task": {"env_kwargs": {"low": 1, "high": 8}}}, "same game"),
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
    for n in range(1, 301):  # rounding once put 48 of 48's upper bound below 1.0
        for k in range(n + 1):
            low, high = wilson_interval(k, n)
            assert 0.0 <= low <= k / n <= high <= 1.0, (k, n)


def test_success_counts_terminated_positive_episodes_only() -> None:
    group = random_group(0, 4, random.Random(0))  # rewards 1, 1, 0, 0; all terminated
    rate = success_rate(group.trajectories)
    assert (rate.successes, rate.episodes) == (2, 4)
    assert rate.mean_reward == pytest.approx(0.5)


def test_warm_start_trains_on_the_guesses_and_end_of_turn_only(default_model_dir) -> None:
    codec = ChatCodec.from_model_dir(default_model_dir)
    conversation = demonstrations(1, seed=5, noise=1.0)[0]
    example = tokenize_conversation(codec, conversation)
    ids, mask = example["input_ids"], example["assistant_masks"]
    guesses = [m["content"] for m in conversation if m["role"] == "assistant"]
    trained = codec.tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])
    assert trained == "".join(f"{g}<|im_end|>" for g in guesses)
    # the ids spell the chat template's rendering (up to the last guess)
    rendered = codec.tokenizer.apply_chat_template(conversation, tokenize=False)
    assert rendered.startswith(codec.tokenizer.decode(ids))


async def test_warm_start_ids_are_the_ids_of_a_server_episode(default_model_dir) -> None:
    """The SFT example of a demonstration and the rollout server's trajectory of the same
    play are the same id stream, with the same mask."""
    codec = ChatCodec.from_model_dir(default_model_dir)
    task = {"low": 1, "high": 8}
    conversation = demonstrations(1, seed=11, noise=1.0, max_turns=3, **task)[0]
    example = tokenize_conversation(codec, conversation)
    guesses = iter([m["content"] for m in conversation if m["role"] == "assistant"])
    engine = FakeEngine(lambda prompt: [*codec.encode(next(guesses)), codec.eos_id])
    episodes = EpisodeRunner(engine, codec, RegistryEnvs(lambda: None), max_model_len=4096)
    spec = EpisodeSpec(
        env_id="rollgym/GuessNumber-v0",
        env_kwargs=task,
        task_seed=11,
        group_id="g",
        sampling=SamplingSettings(max_tokens=16),
        max_turns=3,
    )
    trajectory = await episodes.run(spec)
    assert trajectory.valid
    assert [*trajectory.prompt_ids, *trajectory.completion_ids] == example["input_ids"]
    assert [0] * len(trajectory.prompt_ids) + trajectory.loss_mask == example["assistant_masks"]


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
            alarms={
                "kl_behaviour": 0.01 * i,
                "entropy": 0.5,
                "step_kl": 0.01 if i != 4 else 0.5,
                "step_rejected": float(i == 4),
            },
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
    assert result.undone_steps == 1  # step 4, marked in the alarms panel
    png = write_report_png(result, tmp_path / "r.png", rate, rate, [(3, "kl_behaviour", 0.03)])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # an online point of 48 out of 48 as a run before the fix wrote it: its upper bound
    # below its rate by a rounding (matplotlib refuses a negative error bar)
    perfect = OnlinePoint(
        step=3, policy_version=4, successes=48, episodes=48, low=0.926, high=1 - 1e-16,
        infra_failures=0,
    )  # fmt: skip
    online = dataclasses.replace(result, online_eval=[perfect])
    assert write_report_png(online, tmp_path / "online.png", rate, rate).is_file()
    records = [r.model_copy(update={"alarms": {}}) for r in records]  # a run without any
    bare = dataclasses.replace(result, records=records)
    assert write_report_png(bare, tmp_path / "bare.png").is_file()
