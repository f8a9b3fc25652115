"""Turn complete trajectory groups into the batch TRL's GRPO trainer consumes.

TRL's ``rollout_func`` contract (``GRPOTrainer(rollout_func=...)``) is a dict of per-sample
lists, one entry per completion, the ``num_generations`` samples of a prompt adjacent:

* ``prompt_ids``: the first prompt's token ids (system + first observation);
* ``completion_ids``: everything after it, model and environment tokens in context order;
* ``logprobs``: the behaviour logprob of each completion token (0.0 on environment tokens);
* ``env_mask``: 1 on tokens the model sampled, 0 on tokens the environment wrote. TRL
  multiplies it into the loss mask, so only model tokens are trained on;
* any other key is handed to the reward functions: here the episode's return, its validity
  and its group.

All ids come from the trajectories verbatim: nothing is decoded or re-tokenized, so the
logprobs stay aligned with the tokens they score.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from server.wire import Trajectory, TrajectoryGroup


@dataclasses.dataclass(frozen=True)
class RolloutBatch:
    """One optimizer step's worth of trajectories, in TRL's per-sample layout."""

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    logprobs: list[list[float]]
    env_mask: list[list[int]]
    trajectory_reward: list[float]
    trajectory_valid: list[bool]
    group_id: list[str]

    def as_rollout_output(self) -> dict[str, Any]:
        """The dict ``rollout_func`` returns to TRL."""
        return dataclasses.asdict(self)

    def __len__(self) -> int:
        return len(self.prompt_ids)


def build_batch(groups: Sequence[TrajectoryGroup]) -> RolloutBatch:
    """Flatten ``groups`` (each of the same size) into a ``RolloutBatch``, groups adjacent."""
    trajectories: list[Trajectory] = [t for group in groups for t in group.trajectories]
    return RolloutBatch(
        prompt_ids=[list(t.prompt_ids) for t in trajectories],
        completion_ids=[list(t.completion_ids) for t in trajectories],
        logprobs=[list(t.logprobs) for t in trajectories],
        env_mask=[list(t.loss_mask) for t in trajectories],
        trajectory_reward=[t.reward for t in trajectories],
        trajectory_valid=[t.valid for t in trajectories],
        group_id=[t.group_id for t in trajectories],
    )
