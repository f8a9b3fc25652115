"""The checks a pulled group must pass before training, the staleness window first.

The window (``rollgym.contract.staleness.is_fresh``): a trainer at policy version ``V``
trains on a group only if ``0 <= V - group.min_version <= max_staleness``. The server already filters by this rule when it answers a pull; the trainer checks again
(its version may have moved after the request left) and also drops groups it has trained
on before (a lease re-delivered after a restart), groups larger than ``group_size`` or
empty, and groups with an empty completion. Every drop is counted. A group may be smaller
than ``group_size``: the server keeps only its valid episodes (an infrastructure failure
removes one); ``trainer.batch`` pads it with samples TRL gives no weight.

With ``staleness_unit="turn"`` a group is judged by its newest turn instead
(``rollgym.contract.staleness``), and ``mask_stale_turns`` takes the turns older than the
window out of the loss: their tokens stay in the context the later turns were sampled from,
and the episode's return still scores the group.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Container, Sequence

from rollgym.contract.staleness import StalenessUnit, is_fresh, window_version
from rollgym.contract.wire import Trajectory, TrajectoryGroup


@dataclasses.dataclass(frozen=True)
class Selection:
    """A pull's groups, sorted into the ones to train on and the ones dropped (with why)."""

    fresh: list[TrajectoryGroup]
    stale: list[TrajectoryGroup]
    already_trained: list[TrajectoryGroup]
    malformed: list[TrajectoryGroup]

    @property
    def dropped(self) -> list[TrajectoryGroup]:
        return self.stale + self.already_trained + self.malformed


def select_groups(
    groups: Sequence[TrajectoryGroup],
    *,
    trainer_version: int,
    max_staleness: int,
    group_size: int,
    already_trained: Container[str],
    unit: StalenessUnit = "group",
) -> Selection:
    """Sort pulled ``groups`` by the checks in the module docstring, keeping their order."""
    fresh: list[TrajectoryGroup] = []
    stale: list[TrajectoryGroup] = []
    seen: list[TrajectoryGroup] = []
    malformed: list[TrajectoryGroup] = []
    for group in groups:
        if group.group_id in already_trained:
            seen.append(group)
        elif not 1 <= len(group.trajectories) <= group_size or any(
            not t.completion_ids for t in group.trajectories
        ):
            malformed.append(group)
        elif not is_fresh(
            trainer_version,
            window_version(unit, group.min_version, group.max_version),
            max_staleness,
        ):
            stale.append(group)
        else:
            fresh.append(group)
    return Selection(fresh=fresh, stale=stale, already_trained=seen, malformed=malformed)


@dataclasses.dataclass(frozen=True)
class Masked:
    """A group with its stale turns out of the loss, and how many turns that took."""

    group: TrajectoryGroup
    turns: int


def mask_stale_turns(group: TrajectoryGroup, *, trainer_version: int, max_staleness: int) -> Masked:
    """``group`` with the model tokens of every turn outside the window masked (``loss_mask``
    0, as an environment's tokens are). A turn's tokens are the next ``completion_tokens``
    model tokens of the trajectory, turn after turn; a trajectory whose turns do not account
    for its model tokens (an external agent's session may not) is masked whole if any turn
    is stale, so nothing out of the window is ever trained on."""
    masked_turns = 0
    trajectories = []
    for trajectory in group.trajectories:
        fresh = [
            is_fresh(trainer_version, t.policy_version, max_staleness) for t in trajectory.turns
        ]
        if all(fresh) and is_fresh(trainer_version, trajectory.min_version, max_staleness):
            trajectories.append(trajectory)
            continue
        masked_turns += fresh.count(False)
        trajectories.append(_masked(trajectory, fresh))
    return Masked(group.model_copy(update={"trajectories": trajectories}), masked_turns)


def _masked(trajectory: Trajectory, fresh: list[bool]) -> Trajectory:
    """``trajectory`` with the model tokens of its turns not ``fresh`` masked."""
    turn_tokens = [turn.completion_tokens for turn in trajectory.turns]
    if sum(turn_tokens) != sum(trajectory.loss_mask):  # turns do not map onto the tokens
        return trajectory.model_copy(update={"loss_mask": [0] * len(trajectory.loss_mask)})
    keep = [keep for keep, n in zip(fresh, turn_tokens, strict=True) for _ in range(n)]
    model_tokens = iter(keep)
    mask = [int(next(model_tokens)) if m else 0 for m in trajectory.loss_mask]
    return trajectory.model_copy(update={"loss_mask": mask})
