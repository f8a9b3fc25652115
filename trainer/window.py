"""The checks a pulled group must pass before training, the staleness window first.

The window (``rollgym.contract.staleness.is_fresh``): a trainer at policy version ``V``
trains on a group only if ``0 <= V - group.min_version <= max_staleness``. The server already filters by this rule when it answers a pull; the trainer checks again
(its version may have moved after the request left) and also drops groups it has trained
on before (a lease re-delivered after a restart), groups larger than ``group_size`` or
empty, and groups with an empty completion. Every drop is counted. A group may be smaller
than ``group_size``: the server keeps only its valid episodes (an infrastructure failure
removes one); ``trainer.batch`` pads it with samples TRL gives no weight.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Container, Sequence

from rollgym.contract.staleness import is_fresh
from rollgym.contract.wire import TrajectoryGroup


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
        elif not is_fresh(trainer_version, group.min_version, max_staleness):
            stale.append(group)
        else:
            fresh.append(group)
    return Selection(fresh=fresh, stale=stale, already_trained=seen, malformed=malformed)
