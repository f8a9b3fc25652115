"""The staleness window and the other checks a pulled group must pass before training.

A trainer whose weights are policy version ``V`` trains on a group only if every turn of it
was sampled recently enough::

    staleness = V - group.min_version           # versions between sampling and training
    fresh     = 0 <= staleness <= max_staleness # 0: on-policy only (synchronous mode)

A negative staleness (a group "from the future") only happens when the server's version
numbering restarted under the trainer (a server restart without its version): such a group
cannot be placed on this run's policy lineage, so it counts as stale too.

The server already filters by this rule when it answers a pull; the trainer checks again
(its version may have moved after the request left) and also drops groups it has trained
on before (a lease re-delivered after a restart), groups larger than ``group_size`` or
empty, and groups with an empty completion. Every drop is counted. A group may be smaller
than ``group_size``: the server keeps only its valid episodes (an infrastructure failure
removes one); ``trainer.batch`` pads it with samples TRL gives no weight.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Container, Sequence

from rollgym.server.wire import TrajectoryGroup


def staleness(trainer_version: int, min_version: int) -> int:
    """How many policy versions the trainer has moved on since the oldest turn was sampled."""
    return trainer_version - min_version


def is_fresh(trainer_version: int, min_version: int, max_staleness: int) -> bool:
    """The window rule: ``0 <= trainer_version - min_version <= max_staleness``."""
    return 0 <= staleness(trainer_version, min_version) <= max_staleness


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
