"""Collapse alarms on known logprobs (trainer.alarms)."""

from __future__ import annotations

import math

import pytest
import torch

from rollgym.trainer.alarms import behaviour_stats, zero_variance_share


def test_same_logprobs_give_zero_kl_and_unit_ratios() -> None:
    logps = torch.tensor([[-0.5, -2.0, -1.0]])
    stats = behaviour_stats(logps, logps.clone(), torch.ones(1, 3), cap=3.0)
    assert stats["kl_behaviour"] == 0.0
    assert stats["is_ratio_p01"] == stats["is_ratio_p50"] == stats["is_ratio_max"] == 1.0
    assert stats["is_truncated"] == 0.0


def test_kl_and_ratios_on_the_masked_tokens_only() -> None:
    trainer = torch.tensor([[math.log(0.5), math.log(0.9), 0.0]])
    behaviour = torch.tensor([[math.log(0.25), math.log(0.9), -50.0]])  # last: env token
    stats = behaviour_stats(trainer, behaviour, torch.tensor([[1, 1, 0]]), cap=1.5)
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
