"""Which finished groups the trainer gets: drop zero-variance groups, keep negative samples.

GRPO's advantage is a reward minus its group's mean: a group whose rewards are all equal
has zero advantage everywhere and teaches nothing, so it is dropped (and counted). Groups
with low or negative rewards are kept: they carry the signal of what not to do. Invalid
trajectories (infrastructure failures) never count as samples; a group keeps its valid
ones only if at least ``min(2, group_size)`` remain.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence

from rollgym.contract.wire import Trajectory


class Verdict(enum.Enum):
    KEEP = "keep"
    ZERO_VARIANCE = "zero_variance"
    TOO_FEW_VALID = "too_few_valid"


@dataclasses.dataclass(frozen=True)
class GroupFilter:
    """Decides a finished group's fate.

    >>> keep = GroupFilter(group_size=2, drop_zero_variance=True)
    >>> keep.verdict([1.0, -1.0]), keep.verdict([0.5, 0.5]), keep.verdict([1.0])
    (<Verdict.KEEP: 'keep'>, <Verdict.ZERO_VARIANCE: 'zero_variance'>, <Verdict.TOO_FEW_VALID: 'too_few_valid'>)
    """

    group_size: int
    drop_zero_variance: bool = True
    tolerance: float = 1e-9

    def verdict(self, rewards: Sequence[float]) -> Verdict:
        """The fate of a group whose *valid* trajectories earned ``rewards``."""
        if len(rewards) < min(2, self.group_size):
            return Verdict.TOO_FEW_VALID
        if self.drop_zero_variance and self.flat(rewards):
            return Verdict.ZERO_VARIANCE
        return Verdict.KEEP

    def flat(self, rewards: Sequence[float]) -> bool:
        """Whether ``rewards`` (two or more) are all equal: every sample solved, or none."""
        return len(rewards) > 1 and max(rewards) - min(rewards) <= self.tolerance

    def split(
        self, trajectories: Sequence[Trajectory]
    ) -> tuple[list[Trajectory], list[Trajectory]]:
        """(valid, invalid) trajectories of a group."""
        valid = [t for t in trajectories if t.valid]
        invalid = [t for t in trajectories if not t.valid]
        return valid, invalid
