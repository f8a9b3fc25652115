"""``IntervalSet``: the union of many time spans, kept as sorted disjoint intervals.

A stage is *busy* while at least one of its spans covers the moment (the trainer's
definition, ``trainer.stages``). Hundreds of generations run at once, so their spans are
merged on arrival: a stage that never rests holds a single interval, and the busy time of
any window is a sum over the few intervals that touch it::

    busy = IntervalSet()
    busy.add(0.0, 2.0); busy.add(1.0, 3.0); busy.add(5.0, 6.0)
    busy.intervals          # [(0.0, 3.0), (5.0, 6.0)]
    busy.covered(2.0, 5.5)  # 1.5 = (3.0 - 2.0) + (5.5 - 5.0)
"""

from __future__ import annotations

import bisect


class IntervalSet:
    """Sorted, disjoint, closed-open intervals ``[start, end)`` (see the module docstring)."""

    def __init__(self) -> None:
        self._starts: list[float] = []
        self._ends: list[float] = []

    @property
    def intervals(self) -> list[tuple[float, float]]:
        return list(zip(self._starts, self._ends, strict=True))

    def add(self, start: float, end: float) -> None:
        """Merge ``[start, end)`` in; empty or reversed spans are ignored."""
        if not end > start:
            return
        # Every interval that overlaps or touches [start, end] merges into one.
        first = bisect.bisect_left(self._ends, start)
        last = bisect.bisect_right(self._starts, end)
        if first < last:
            start = min(start, self._starts[first])
            end = max(end, self._ends[last - 1])
        self._starts[first:last] = [start]
        self._ends[first:last] = [end]

    def covered(self, start: float, end: float) -> float:
        """Seconds of ``[start, end)`` inside the set."""
        if not end > start:
            return 0.0
        total = 0.0
        i = bisect.bisect_right(self._ends, start)
        while i < len(self._starts) and self._starts[i] < end:
            total += min(end, self._ends[i]) - max(start, self._starts[i])
            i += 1
        return total

    def forget_before(self, instant: float) -> None:
        """Drop what ends before ``instant`` and cut what straddles it (bounded memory)."""
        cut = bisect.bisect_right(self._ends, instant)
        del self._starts[:cut], self._ends[:cut]
        if self._starts and self._starts[0] < instant:
            self._starts[0] = instant
