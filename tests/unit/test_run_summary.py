"""A mixture's part per env in summary.json (what each env trained on, its held-out rate)
and in report.png (each env's success curve)."""

from __future__ import annotations

import dataclasses
import json

from rollgym.run.pipeline import RunConfig, RunReport
from rollgym.run.plot import env_success_curves, write_report_png
from rollgym.run.summary import HeldOut, write_summary
from rollgym.trainer.checkpoint import DropCounts
from rollgym.trainer.evaluate import SuccessRate
from rollgym.trainer.loop import TrainResult
from rollgym.trainer.progress import EnvStep, StepRecord
from rollgym.trainer.stages import STAGES

GUESS, MINE = "rollgym/GuessNumber-v0", "example/Reverse-v0"


def _rate(successes: int, episodes: int) -> SuccessRate:
    return SuccessRate(successes, episodes, low=0.0, high=1.0, mean_reward=0.0)


def _record(step: int, per_env: dict[str, EnvStep]) -> StepRecord:
    return StepRecord(
        step=step, at=0.0, policy_version=step, trajectories=8, reward_mean=0.0,
        success_rate=0.0, version_lag_mean=0.0, version_lag_max=0, invalid=0,
        dropped_total=0, wait_s=0.0, train_s=0.0, sync_s=0.0, per_env=per_env,
    )  # fmt: skip


def _mixture_records() -> list[StepRecord]:
    return [
        _record(1, {GUESS: EnvStep(trajectories=6, reward_mean=1.0, success_rate=0.5),
                    MINE: EnvStep(trajectories=2, reward_mean=0.0, success_rate=0.0)}),
        _record(2, {GUESS: EnvStep(trajectories=2, reward_mean=0.0, success_rate=1.0)}),
    ]  # fmt: skip


def _train(records: list[StepRecord]) -> TrainResult:
    return TrainResult(
        steps=len(records), policy_version=2, resumed_from=None, records=records,
        dropped=DropCounts(), groups_trained=4, stage_shares={}, trl_logs=[],
    )  # fmt: skip


def test_each_env_gets_its_trained_numbers_and_held_out_rate(tmp_path) -> None:
    train = _train(_mixture_records())
    report = RunReport(
        train=train, warm_start=None, final=_rate(3, 4), wall_s=1.0,
        report_png=tmp_path / "report.png", summary_json=tmp_path / "summary.json",
        alarm_crossings=[],
        per_env={
            GUESS: HeldOut(warm_start=_rate(1, 4), final=_rate(3, 4)),
            MINE: HeldOut(warm_start=_rate(0, 4), final=_rate(1, 4), best=_rate(2, 4)),
        },
    )  # fmt: skip
    write_summary(report, RunConfig(run_dir=tmp_path))
    per_env = json.loads((tmp_path / "summary.json").read_text())["per_env"]
    assert per_env[GUESS]["trained_episodes"] == 8
    assert per_env[GUESS]["reward_mean"] == 6 / 8 and per_env[GUESS]["success_rate"] == 5 / 8
    assert per_env[MINE]["trained_episodes"] == 2 and per_env[MINE]["reward_mean"] == 0.0
    assert per_env[MINE]["held_out_rl"]["rate"] == 0.25
    assert per_env[MINE]["held_out_warm_start"]["rate"] == 0.0
    assert per_env[MINE]["held_out_best"]["rate"] == 0.5
    assert per_env[GUESS]["held_out_warm_start"]["rate"] == 0.25
    assert per_env[GUESS]["held_out_best"] is None  # no best point: not evaluated


def test_report_png_draws_each_envs_success_only_for_a_mixture(tmp_path) -> None:
    mixture = _train(_mixture_records())
    assert env_success_curves(mixture) == {GUESS: ([1, 2], [0.5, 1.0]), MINE: ([1], [0.0])}
    alone = _train([_record(1, {GUESS: EnvStep(trajectories=8, reward_mean=1, success_rate=1)})])
    assert env_success_curves(alone) == {}
    stage_shares = {stage: (1.0, 1.0) for stage in STAGES}
    png = write_report_png(
        dataclasses.replace(mixture, stage_shares=stage_shares), tmp_path / "report.png"
    )
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
