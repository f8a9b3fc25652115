"""Collapse alarms on known logprobs (trainer.alarms)."""

from __future__ import annotations

import math

import pytest
import torch

from rollgym.trainer.alarms import (
    AlarmWatch,
    alarm_crossings,
    behaviour_stats,
    step_alarms,
    zero_variance_share,
)
from rollgym.trainer.config import AlarmBounds
from rollgym.trainer.progress import StepRecord


def test_same_logprobs_give_zero_kl_and_unit_ratios(device) -> None:
    logps = torch.tensor([[-0.5, -2.0, -1.0]], device=device)
    stats = behaviour_stats(logps, logps.clone(), torch.ones(1, 3, device=device), cap=3.0)
    assert stats["kl_behaviour"] == 0.0
    assert stats["is_ratio_p01"] == stats["is_ratio_p50"] == stats["is_ratio_max"] == 1.0
    assert stats["is_truncated"] == 0.0


def test_kl_and_ratios_on_the_masked_tokens_only(device) -> None:
    trainer = torch.tensor([[math.log(0.5), math.log(0.9), 0.0]], device=device)
    behaviour = torch.tensor([[math.log(0.25), math.log(0.9), -50.0]], device=device)  # env
    mask = torch.tensor([[1, 1, 0]], device=device)
    stats = behaviour_stats(trainer, behaviour, mask, cap=1.5)
    # ratios 2 and 1; k3 = r - 1 - log r averaged over the two sampled tokens
    assert stats["kl_behaviour"] == pytest.approx((2 - 1 - math.log(2)) / 2)
    assert stats["is_ratio_max"] == pytest.approx(2.0)
    assert stats["is_truncated"] == pytest.approx(0.5)


def test_no_sampled_token_gives_no_stats() -> None:
    assert behaviour_stats(torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2), cap=3.0) == {}


def test_zero_variance_share_counts_flat_groups_and_ignores_padding() -> None:
    rewards = [1.0, 1.0, None, 0.0, 1.0, 0.5, None, None, 0.2]
    # groups of 3: [1, 1, pad] flat, [0, 1, 0.5] not, [pad, pad, 0.2] one valid: flat
    assert zero_variance_share(rewards, 3) == pytest.approx(2 / 3)


def test_step_alarms_reads_trl_keys_and_ignores_the_rest() -> None:
    logs = {"loss": 0.1, "entropy": 0.7, "grad_norm": 1.2, "alarms/kl_behaviour": 0.003}
    logs |= {"clip_ratio/region_mean": 0.01, "alarms/is_ratio_p99": 1.3}
    assert step_alarms(logs) == {
        "entropy": 0.7,
        "grad_norm": 1.2,
        "kl_behaviour": 0.003,
        "clip_ratio": 0.01,
        "is_ratio_p99": 1.3,
    }


def test_a_crossing_warns_once_until_the_metric_comes_back() -> None:
    watch = AlarmWatch(AlarmBounds(max_entropy=1.5, min_is_ratio_p01=0.5))
    assert watch.check(1, {"entropy": 0.9, "is_ratio_p01": 0.8}) == []
    assert watch.check(2, {"entropy": 1.7}) == ["ALARM step 2: entropy 1.7 above 1.5"]
    assert watch.check(3, {"entropy": 2.0}) == []  # still above: no second line
    assert watch.check(4, {"entropy": 1.0, "is_ratio_p01": 0.3}) == [
        "ALARM step 4: is_ratio_p01 0.3 below 0.5"
    ]
    assert watch.check(5, {"entropy": 1.6}) == ["ALARM step 5: entropy 1.6 above 1.5"]
    assert [c[:2] for c in watch.crossings] == [(2, "entropy"), (4, "is_ratio_p01"), (5, "entropy")]


def test_unwatched_metrics_never_warn() -> None:
    bounds = AlarmBounds(
        max_kl_behaviour=None, max_clip_ratio=None, min_is_ratio_p01=None, max_is_ratio_p99=None
    )
    assert AlarmWatch(bounds).check(1, {"kl_behaviour": 9.0, "grad_norm": 50.0}) == []


def test_crossings_replay_from_the_step_records() -> None:
    def record(step: int, kl: float) -> StepRecord:
        fields = dict.fromkeys(("reward_mean", "success_rate", "version_lag_mean"), 0.0)
        fields |= dict.fromkeys(("wait_s", "train_s", "sync_s"), 0.0)
        counts = dict.fromkeys(("trajectories", "version_lag_max", "invalid", "dropped_total"), 0)
        return StepRecord(
            step=step, at=0.0, policy_version=step, alarms={"kl_behaviour": kl}, **fields, **counts
        )

    records = [record(1, 0.001), record(2, 0.15), record(3, 0.2), record(4, 0.0)]
    assert alarm_crossings(records, AlarmBounds()) == [(2, "kl_behaviour", 0.15)]


def test_the_live_table_shows_the_step_alarms_and_keeps_finite_ones_only() -> None:
    from rollgym.trainer.progress import RunProgress

    progress = RunProgress(clock=lambda: 100.0)
    progress.end_step(step=1, policy_version=2, dropped_total=0)
    alarms = {"kl_behaviour": 0.004, "is_ratio_p01": 0.9, "is_ratio_p50": 1.0}
    record = progress.add_alarms({**alarms, "is_ratio_p99": 1.1, "entropy": math.nan})
    assert "entropy" not in record.alarms and progress.steps[-1] is record
    table = progress.render(total_steps=10)
    assert "  alarms: KL(b||t) 0.0040, IS p01/p50/p99 0.90/1.00/1.10" in table
