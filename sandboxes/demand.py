"""How many warm boxes of one image to keep: the demand of the recent past.

A pool of many images cannot keep every image warm, and need not: training visits an
image in bursts (a GRPO group of 8 episodes of one task, then other tasks). The warm
count of an image follows its demand: the most boxes of it leased at once within the
last ``window_s`` seconds,

    target(now) = max { leased(t) : now - window_s <= t <= now }

so a burst's boxes stay warm for the next burst of the same image, and an image nobody
asked for in a window gives its boxes back (the pool stops the surplus; the global cap
and least-recently-used eviction decide between images before that). ``Demand`` keeps the
step function ``leased(t)`` as the changes of the window, a few entries per image:

>>> demand = Demand(window_s=60.0)
>>> demand.note(leased=3, now=0.0); demand.note(leased=1, now=10.0)
>>> demand.target(now=30.0)
3
>>> demand.target(now=65.0)  # 3 were leased until t=10, inside the window [5, 65]
3
>>> demand.target(now=75.0)  # the burst of 3 ended before the window [15, 75]
1
"""

from __future__ import annotations

import collections


class Demand:
    """The peak number of boxes leased at once within the last ``window_s`` seconds."""

    def __init__(self, window_s: float) -> None:
        if window_s <= 0:
            raise ValueError(f"window_s must be positive, got {window_s}")
        self.window_s = window_s
        self._changes: collections.deque[tuple[float, int]] = collections.deque()
        self._current = 0

    def note(self, *, leased: int, now: float) -> None:
        """The number of boxes leased changed to ``leased`` at ``now`` (monotonic seconds)."""
        self._forget(now)
        self._current = leased
        self._changes.append((now, leased))

    def target(self, *, now: float) -> int:
        """How many boxes to keep: the peak of the window (the current count included)."""
        self._forget(now)
        return max([self._current, *(leased for _, leased in self._changes)])

    def _forget(self, now: float) -> None:
        """Drop the changes whose level ended before the window began (the next change is
        older than the window's start too); the first one kept is the level in force when
        the window began."""
        start = now - self.window_s
        while len(self._changes) > 1 and self._changes[1][0] <= start:
            self._changes.popleft()
