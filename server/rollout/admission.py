"""Admission control from the staleness window: never make samples bound to be dropped.

A trainer at version V takes a trajectory only if ``V - min_version <= max_staleness``, and
it consumes ``batch`` groups per version. So at most ``(max_staleness + 1) x batch`` groups
can still be trained on when they are made; anything beyond that would wait in the buffer
until it went stale. The gate therefore admits a new group only while::

    buffered + in_flight / oversample + 1 / oversample <= (max_staleness + 1) x batch

``buffered`` counts groups in the buffer not yet acknowledged (ready or leased),
``in_flight`` the groups being rolled out. ``oversample`` (>= 1) is the factor by which
the runner over-generates because filtering (zero-variance groups) drops about
``1 - 1/oversample`` of them: an in-flight group is expected to yield ``1/oversample``
kept groups. With ``oversample = 1`` (the default) this is exactly
``in_flight + buffered <= (max_staleness + 1) x batch``.
"""

from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class AdmissionGate:
    """The staleness window's budget of groups (see the module docstring).

    >>> gate = AdmissionGate(max_staleness=1, batch_groups=4)
    >>> gate.capacity, gate.room(in_flight=3, buffered=4), gate.room(in_flight=4, buffered=4)
    (8, 1, 0)
    >>> AdmissionGate(max_staleness=0, batch_groups=4, oversample=1.5).room(0, 2)
    3
    """

    max_staleness: int
    batch_groups: int
    oversample: float = 1.0

    def __post_init__(self) -> None:
        if self.max_staleness < 0:
            raise ValueError("max_staleness must be >= 0")
        if self.batch_groups < 1:
            raise ValueError("batch_groups must be >= 1")
        if self.oversample < 1.0:
            raise ValueError("oversample must be >= 1.0")

    @property
    def capacity(self) -> int:
        """``(max_staleness + 1) x batch``: groups that can still be trained on when made."""
        return (self.max_staleness + 1) * self.batch_groups

    def room(self, in_flight: int, buffered: int) -> int:
        """How many more groups may start now (never negative)."""
        budget = (self.capacity - buffered) * self.oversample
        return max(math.floor(budget + 1e-9) - in_flight, 0)

    def admits(self, in_flight: int, buffered: int) -> bool:
        return self.room(in_flight, buffered) > 0
