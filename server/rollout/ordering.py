"""The order in which task seeds are rolled out: random, length-grouped, or alternating.

A batch waits for its slowest episode. Length grouping runs tasks of similar length side
by side, so episodes that start together also finish together; the length of a seed is
what its last group measured (mean tokens per episode). Sorting alone would also fix the
order in which the trainer sees tasks (short ones first, every pass), so ``alternate``
interleaves length-grouped passes with random ones.

* ``random``: each pass over the seeds in a fresh random order;
* ``length_grouped``: each pass by measured length; seeds never measured come first, in
  random order;
* ``alternate``: passes alternate between ``length_grouped`` and ``random``.

With no seed list, seeds are 0, 1, 2, ... and never repeat, so no length is known ahead:
the order is simply ascending.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Sequence
from typing import Literal

Order = Literal["random", "length_grouped", "alternate"]


class SeedSchedule:
    """Hands out task seeds one by one (see the module docstring).

    >>> schedule = SeedSchedule([1, 2, 3], "length_grouped", random.Random(0))
    >>> for seed, length in ((1, 30.0), (2, 10.0), (3, 20.0)):
    ...     schedule.observe(seed, length)
    >>> [schedule.next() for _ in range(3)]
    [2, 3, 1]
    """

    def __init__(self, seeds: Sequence[int] | None, order: Order, rng: random.Random):
        if seeds is not None and not seeds:
            raise ValueError("the seed list is empty")
        self._seeds = list(seeds) if seeds is not None else None
        self._order = order
        self._rng = rng
        self._lengths: dict[int, float] = {}
        self._passes = 0
        self._current: Iterator[int] = iter(())
        self._counter = itertools.count()

    def observe(self, seed: int, length: float) -> None:
        """Record a finished group's mean episode length (tokens) for ``seed``."""
        self._lengths[seed] = length

    def next(self) -> int:
        if self._seeds is None:
            return next(self._counter)
        for seed in self._current:
            return seed
        self._current = iter(self._next_pass(self._seeds))
        return next(self._current)

    def _next_pass(self, seeds: list[int]) -> list[int]:
        by_length = self._order == "length_grouped" or (
            self._order == "alternate" and self._passes % 2 == 0
        )
        self._passes += 1
        shuffled = self._rng.sample(seeds, len(seeds))
        if not by_length:
            return shuffled
        unknown = [s for s in shuffled if s not in self._lengths]
        known = sorted((s for s in shuffled if s in self._lengths), key=self._lengths.__getitem__)
        return unknown + known
