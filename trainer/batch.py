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

TRL compares samples in blocks of exactly ``group_size``. A group the server shortened (it
keeps only valid episodes) is padded with copies of its first episode marked invalid and
with an all-zero ``env_mask``: their reward is ``None`` (out of the group baseline, zero
advantage) and no token of theirs enters the loss or its normaliser.

Groups of external-agent sessions (``source="session"``) have the same shape and go the
same way: G sessions on one task give real advantages; a lone session is a group of one
(no baseline), so it is padded and its advantage is zero.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from rollgym.contract.wire import Trajectory, TrajectoryGroup


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


def build_batch(groups: Sequence[TrajectoryGroup], group_size: int) -> RolloutBatch:
    """Flatten ``groups`` into a ``RolloutBatch``, each padded to ``group_size``, adjacent."""
    samples: list[tuple[Trajectory, bool]] = []  # (trajectory, is padding)
    for group in groups:
        if not 1 <= len(group.trajectories) <= group_size:
            raise ValueError(f"group {group.group_id} has {len(group.trajectories)} samples")
        samples += [(t, False) for t in group.trajectories]
        samples += [(group.trajectories[0], True)] * (group_size - len(group.trajectories))
    return RolloutBatch(
        prompt_ids=[list(t.prompt_ids) for t, _ in samples],
        completion_ids=[list(t.completion_ids) for t, _ in samples],
        logprobs=[list(t.logprobs) for t, _ in samples],
        env_mask=[[0] * len(t.loss_mask) if pad else list(t.loss_mask) for t, pad in samples],
        trajectory_reward=[t.reward for t, _ in samples],
        trajectory_valid=[t.valid and not pad for t, pad in samples],
        group_id=[t.group_id for t, _ in samples],
    )
