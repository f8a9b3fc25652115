"""A look inside one GRPO step of the real trainer: the batch it built and what reached the loss.

``probe_steps`` wraps (never replaces) the trainer's batch builder and TRL's scoring hook
and keeps what they returned; ``assert_advantages_follow_rewards`` checks that a group's
advantages are non-zero exactly where its rewards differ, and sum to zero per group.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rollgym.trainer import feed, grpo
from rollgym.trainer.batch import RolloutBatch


@dataclasses.dataclass
class StepProbe:
    batches: list[RolloutBatch] = dataclasses.field(default_factory=list)
    outputs: list[dict[str, torch.Tensor]] = dataclasses.field(default_factory=list)


def probe_steps(monkeypatch: pytest.MonkeyPatch) -> StepProbe:
    """Keep each batch the trainer builds and each scored output TRL's loss gets."""
    probe = StepProbe()
    build, score = feed.build_batch, grpo.ServerGRPOTrainer._generate_and_score_completions

    def built(*args: object) -> RolloutBatch:
        probe.batches.append(build(*args))  # type: ignore[arg-type]
        return probe.batches[-1]

    def scored(self: grpo.ServerGRPOTrainer, inputs: object) -> dict[str, torch.Tensor]:
        probe.outputs.append(score(self, inputs))  # type: ignore[arg-type]
        return probe.outputs[-1]

    monkeypatch.setattr(feed, "build_batch", built)
    monkeypatch.setattr(grpo.ServerGRPOTrainer, "_generate_and_score_completions", scored)
    return probe


def assert_advantages_follow_rewards(
    batch: RolloutBatch,
    output: dict[str, torch.Tensor],
    groups: int,
    group_size: int,
    *,
    some_group_varies: bool = True,
) -> None:
    """A group's advantages are non-zero exactly where its rewards differ, and sum to 0;
    ``some_group_varies``: at least one group's rewards differ (the batch teaches)."""
    rewards = torch.tensor(batch.trajectory_reward).view(groups, group_size)
    advantages = output["advantages"].view(groups, group_size)
    varied = rewards.max(dim=1).values > rewards.min(dim=1).values
    assert varied.any() or not some_group_varies, (rewards, advantages)
    assert torch.equal(advantages.abs().amax(dim=1) > 1e-6, varied), (
        rewards,
        advantages,
    )
    torch.testing.assert_close(advantages.sum(dim=1), torch.zeros(groups), atol=1e-3, rtol=0)
