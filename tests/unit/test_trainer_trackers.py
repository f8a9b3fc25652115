"""Experiment tracking through TRL's ``report_to``: rollgym's series beside TRL's metrics,
read back from each tracker's own local store (TensorBoard's ``EventAccumulator``, W&B's
offline transaction log, MLflow's client on its SQLite store, trackio's SQLite database).

Real twin: tests/e2e/test_run_user_env_e2e.py (``rollgym run`` with all four ``--report-to``
on the real server).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import get_args

import pytest
from tracker_stores import mlflow_series, tensorboard_series, trackio_series, wandb_series
from trainer_fakes import FakeServer, make_trajectory

from rollgym.contract.wire import RolloutJob, SamplingSettings, TrajectoryGroup
from rollgym.trainer.checkpoint import DropCounts
from rollgym.trainer.config import OnlineEvalConfig, Tracker, TrainerConfig, parse_config
from rollgym.trainer.errors import TrainerConfigError
from rollgym.trainer.loop import TrainResult, train
from rollgym.trainer.online_eval import EvalTask
from rollgym.trainer.progress import RunProgress
from rollgym.trainer.series import step_series
from rollgym.trainer.trackers import local_stores, local_tracking, run_name


def test_tensorboard_gets_trl_and_rollgym_series_per_step(tmp_path, default_model_dir) -> None:
    fake = FakeServer()
    config = TrainerConfig(
        output_dir=tmp_path / "run",
        group_size=4,
        groups_per_batch=2,
        total_steps=2,
        pull_timeout_s=0.1,
        online_eval=OnlineEvalConfig(every=2, episodes=4),
        report_to=["tensorboard"],
    )
    task = EvalTask(env_id="e", env_kwargs={}, max_turns=2, sampling=SamplingSettings())
    client = fake.client()
    job = RolloutJob(env_id="e", group_size=4, groups_per_batch=2)
    result = train(
        config,
        client,
        default_model_dir,
        on_ready=lambda: client.start_rollouts(job),
        eval_tasks=[task],
        held_out_seeds=range(100, 108),
        printer=None,
    )

    series = tensorboard_series(config.output_dir)
    assert [step for step, _ in series["train/loss"]] == [1, 2]  # TRL's own
    rewards = [value for _, value in series["train/rollgym/reward_mean"]]
    assert rewards == pytest.approx([r.reward_mean for r in result.records])
    lags = [value for _, value in series["train/rollgym/version_lag_max"]]
    assert lags == [float(r.version_lag_max) for r in result.records]
    for tag in (
        "train/rollgym/stage/sampling/busy_s",
        "train/rollgym/stage/training/waiting_s",
        "train/rollgym/dropped/stale_server",
        "train/rollgym/latency/model_p90",
        "train/rollgym/latency/environment_p99",
    ):
        assert [step for step, _ in series[tag]] == [1, 2], tag
    (point,) = result.online_eval
    assert series["train/rollgym/online_eval/success_rate"] == [(2, pytest.approx(point.rate))]
    # the server's cost board answered to step 1's report, logged with step 2's series; an
    # unpriced server's cost in money is left out
    assert series["train/rollgym/cost/machine_s_per_trained_sample"] == [(2, 1.5)]
    assert not any(tag.startswith("train/rollgym/cost/cost_") for tag in series)
    # the last weights on the held-out seeds, measured at the last step, the job stopped
    assert fake.evaluations[-1].seeds == list(range(100, 108))
    assert fake.job is None  # started when the trainer was ready, stopped before
    held_out = result.held_out["e"]
    assert held_out.episodes == 8
    assert series["train/rollgym/held_out/success_rate"] == [(2, pytest.approx(held_out.rate))]


@pytest.fixture
def tracker_env():
    """W&B's and MLflow's variables unset for the test and put back after it (a user's own
    values would otherwise win over the local stores under test)."""
    every = local_stores(Path("/x"), get_args(Tracker))
    saved = {name: os.environ.pop(name, None) for name in every}
    yield
    for name, value in saved.items():
        os.environ.pop(name, None)
        if value is not None:
            os.environ[name] = value


def _two_steps(output_dir: Path, tracker: str, default_model_dir: Path) -> TrainResult:
    config = TrainerConfig(
        output_dir=output_dir,
        group_size=4,
        groups_per_batch=2,
        total_steps=2,
        pull_timeout_s=0.1,
        report_to=[tracker],
    )
    return train(config, FakeServer().client(), default_model_dir, printer=None)


@pytest.mark.parametrize("tracker", ["wandb", "mlflow", "trackio"])
def test_each_tracker_gets_trl_and_rollgym_series_in_its_local_store(
    tracker, tmp_path, default_model_dir, tracker_env
) -> None:
    output_dir = tmp_path / "run"
    result = _two_steps(output_dir, tracker, default_model_dir)

    if tracker == "wandb":
        series, prefix = wandb_series(output_dir), "train/"
    elif tracker == "mlflow":
        series, prefix = mlflow_series(output_dir), ""  # transformers' MLflow names: no train/
    else:
        series, prefix = trackio_series(run_name(output_dir)), "train/"
    rewards = series[f"{prefix}rollgym/reward_mean"]
    assert [step for step, _ in rewards] == [1, 2]
    assert [value for _, value in rewards] == pytest.approx([r.reward_mean for r in result.records])
    assert [step for step, _ in series[f"{prefix}loss"]] == [1, 2]  # TRL's own beside rollgym's
    assert [step for step, _ in series[f"{prefix}rollgym/stage/training/busy_s"]] == [1, 2]
    assert not any(name in os.environ for name in local_stores(output_dir, [tracker]))


def test_w_and_b_stays_offline_and_a_users_tracking_server_wins(tmp_path, tracker_env) -> None:
    os.environ["MLFLOW_TRACKING_URI"] = "http://mlflow.example:5000"
    with local_tracking(tmp_path, ["mlflow", "wandb"]) as seen:
        assert seen["MLFLOW_TRACKING_URI"] == "http://mlflow.example:5000"
        assert seen["WANDB_MODE"] == "offline" and seen["WANDB_DIR"] == str(tmp_path)
        assert os.environ["WANDB_PROJECT"] == "rollgym"
    assert os.environ["MLFLOW_TRACKING_URI"] == "http://mlflow.example:5000"  # the user's stays
    assert "WANDB_MODE" not in os.environ  # ours go


def test_a_w_and_b_run_the_user_started_stays_theirs(tmp_path, tracker_env) -> None:
    import wandb

    mine = wandb.init(project="mine", dir=tmp_path, mode="offline")
    try:
        with local_tracking(tmp_path / "run", ["wandb"]):
            pass  # the callback logs into the user's run rather than starting one
        assert wandb.run is mine
    finally:
        mine.finish()


def test_off_by_default_nothing_is_written(tmp_path, default_model_dir) -> None:
    config = TrainerConfig(
        output_dir=tmp_path / "run", group_size=4, groups_per_batch=1, total_steps=1
    )
    assert config.report_to == []
    train(config, FakeServer().client(), default_model_dir, printer=None)
    assert not (config.output_dir / "runs").exists()


def test_a_tracker_that_is_not_installed_is_named(tmp_path, monkeypatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "tensorboard" else real(name)
    )
    with pytest.raises(TrainerConfigError, match=r"tensorboard is not installed: pip install"):
        parse_config(TrainerConfig, output_dir=tmp_path, report_to=["tensorboard"])


def _group(version: int, rewards: list[float]) -> TrajectoryGroup:
    trajectories = [
        make_trajectory(group_id="g", version=version, first_turn=[5], reward=reward)
        for reward in rewards
    ]
    return TrajectoryGroup(group_id="g", env_id="fake", trajectories=trajectories)


def test_step_series_names_the_closed_steps_numbers() -> None:
    clock = iter(float(t) for t in range(100))
    progress = RunProgress(clock=lambda: next(clock))
    assert step_series(progress, DropCounts()) == {}
    progress.on_groups([_group(3, [1.0, 0.0])], trainer_version=5)
    progress.end_step(step=1, policy_version=5, dropped_total=4)
    series = step_series(progress, DropCounts(stale_trainer=4))
    assert series["rollgym/reward_mean"] == 0.5
    assert series["rollgym/version_lag_max"] == 2.0
    assert series["rollgym/dropped/stale_trainer"] == 4.0
    assert series["rollgym/dropped/malformed"] == 0.0
    assert {"rollgym/latency/model_p50", "rollgym/stage/buffer/waiting_s"} <= series.keys()
    assert "rollgym/online_eval/success_rate" not in series


def test_a_mixtures_batch_is_split_by_env_in_the_record_the_series_and_the_table() -> None:
    progress = RunProgress()
    guess = _group(0, [1.0, 1.0]).model_copy(update={"env_id": "rollgym/GuessNumber-v0"})
    mine = _group(0, [0.0, 0.5]).model_copy(update={"env_id": "example/Reverse-v0"})
    progress.on_groups([guess, mine], trainer_version=0)
    record = progress.end_step(step=1, policy_version=0, dropped_total=0)
    assert record.per_env["rollgym/GuessNumber-v0"].reward_mean == 1.0
    assert record.per_env["rollgym/GuessNumber-v0"].success_rate == 1.0
    assert record.per_env["example/Reverse-v0"].reward_mean == 0.25
    assert record.per_env["example/Reverse-v0"].trajectories == 2
    series = step_series(progress, DropCounts())
    assert series["rollgym/env/example/Reverse-v0/reward_mean"] == 0.25
    assert series["rollgym/env/rollgym/GuessNumber-v0/success_rate"] == 1.0
    table = progress.render(total_steps=3)
    assert "example/Reverse-v0" in table and "rollgym/GuessNumber-v0" in table
