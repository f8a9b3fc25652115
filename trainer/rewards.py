"""The reward TRL sees: the environment's episode return, passed through from the trajectory.

The environment already scored each episode on the server. TRL computes GRPO's
group-relative advantage from what this function returns,
``(r - mean(group)) / (std(group) + 1e-4)``. A trajectory whose episode hit an
infrastructure failure (``valid=False``) gets ``None``: TRL then leaves it out of its group's
baseline and gives it zero advantage, so it is never trained on as if it had failed the task.
"""

from __future__ import annotations

from collections.abc import Sequence


def trajectory_return(
    completions: Sequence[object],
    trajectory_reward: Sequence[float],
    trajectory_valid: Sequence[bool],
    **_: object,
) -> list[float | None]:
    """TRL reward function: the episode return, or ``None`` for an invalid episode."""
    if not (len(completions) == len(trajectory_reward) == len(trajectory_valid)):
        raise ValueError("one reward and one validity flag per completion")
    return [r if ok else None for r, ok in zip(trajectory_reward, trajectory_valid, strict=True)]
