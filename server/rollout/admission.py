"""Admission control from the staleness window: never make samples bound to be dropped.

At most ``window_capacity(max_staleness, batch) = (max_staleness + 1) x batch`` groups can
still be trained on when they are made (``rollgym.contract.staleness``); anything beyond that
would wait in the buffer until it went stale. The gate therefore admits a new group only
while::

    buffered + in_flight / oversample + 1 / oversample <= (max_staleness + 1) x batch

``buffered`` counts groups in the buffer not yet acknowledged (ready or leased),
``in_flight`` the groups being rolled out. ``oversample`` (>= 1) is the factor by which
the runner over-generates because filtering (zero-variance groups) drops about
``1 - 1/oversample`` of them: an in-flight group is expected to yield ``1/oversample``
kept groups. With ``oversample = 1`` (the default) this is exactly
``in_flight + buffered <= (max_staleness + 1) x batch``.

Two producers make groups: the rollout runner and external-agent sessions. ``SharedWindow``
makes them share one budget: each tells it how many groups it has in flight, and each asks
``room()`` (all in-flight groups, both producers') before starting one, so neither can fill
the window behind the other's back.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from rollgym.contract.staleness import window_capacity


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
        window_capacity(self.max_staleness, self.batch_groups)  # checks both
        if self.oversample < 1.0:
            raise ValueError("oversample must be >= 1.0")

    @property
    def capacity(self) -> int:
        """The window's capacity in groups (``rollgym.contract.staleness``)."""
        return window_capacity(self.max_staleness, self.batch_groups)

    def room(self, in_flight: int, buffered: int) -> int:
        """How many more groups may start now (never negative)."""
        budget = (self.capacity - buffered) * self.oversample
        return max(math.floor(budget + 1e-9) - in_flight, 0)

    def admits(self, in_flight: int, buffered: int) -> bool:
        return self.room(in_flight, buffered) > 0


class SharedWindow:
    """One window's budget for all producers of groups (see the module docstring).

    ``job`` is the running rollout job's gate (the runner sets it); without one, ``default``
    applies (``SessionConfig``'s window). ``buffered`` reads the buffer's depth.

    >>> window = SharedWindow(AdmissionGate(0, 2), buffered=lambda: 1)
    >>> window.count(lambda: 1)
    >>> window.room()
    0
    >>> window.job = AdmissionGate(1, 2)
    >>> window.room()
    2
    """

    def __init__(self, default: AdmissionGate, *, buffered: Callable[[], int]):
        self.default = default
        self.job: AdmissionGate | None = None
        self._buffered = buffered
        self._producers: list[Callable[[], int]] = []

    @property
    def gate(self) -> AdmissionGate:
        return self.job or self.default

    def count(self, in_flight: Callable[[], int]) -> None:
        """Count a producer's groups in flight (``in_flight`` is read at each ``room()``)."""
        self._producers.append(in_flight)

    def room(self) -> int:
        """How many more groups, of any producer, may start now."""
        in_flight = sum(groups() for groups in self._producers)
        return self.gate.room(in_flight, self._buffered())
