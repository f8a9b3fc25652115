"""A curriculum over task seeds: tasks whose recent groups were all solved or all failed are
played less, never dropped.

A group whose rewards are all equal (every sample solved the task, or none did) has zero
advantage everywhere and teaches GRPO nothing (DAPO's dynamic sampling drops such groups
after paying for them; prime-rl keeps difficulty pools). ``Curriculum`` remembers, per seed,
whether each of its last ``window`` groups was flat; when the seed schedule offers a seed
whose recent groups were all flat, it is played only with probability ``floor``, so it
still comes back now and then: a solved task is re-checked, an unsolved one retried as the
policy improves.

    P(play seed) = floor   if its last `window` groups were all flat
                   1       otherwise (or fewer than `window` groups seen)

>>> import random
>>> curriculum = Curriculum(window=2, floor=0.0, rng=random.Random(0))
>>> curriculum.observe(7, flat=True); curriculum.admits(7)
True
>>> curriculum.observe(7, flat=True); curriculum.admits(7)
False
>>> curriculum.observe(7, flat=False); curriculum.admits(7)
True

The runner keeps its memory beside the persisted job (``state``/``restore``), so a server
that restarts resumes the job with the curriculum where it stopped.
"""

from __future__ import annotations

import random
from collections import deque


class Curriculum:
    """Per-seed memory of flat groups and the admission rule above."""

    def __init__(self, *, window: int, floor: float, rng: random.Random) -> None:
        if window < 1 or not 0 <= floor <= 1:
            raise ValueError("a curriculum needs window >= 1 and 0 <= floor <= 1")
        self.window = window
        self.floor = floor
        self._rng = rng
        self._recent: dict[int, deque[bool]] = {}

    def observe(self, seed: int, *, flat: bool) -> None:
        """A finished group of ``seed``: were its rewards all equal?"""
        self._recent.setdefault(seed, deque(maxlen=self.window)).append(flat)

    def admits(self, seed: int) -> bool:
        """Whether to play ``seed`` now (draws from the rng only for a seed held back)."""
        recent = self._recent.get(seed)
        if recent is None or len(recent) < self.window or not all(recent):
            return True
        return self._rng.random() < self.floor

    def state(self) -> dict[str, list[bool]]:
        """Its memory, as JSON can hold it (``restore`` takes it back)."""
        return {str(seed): list(recent) for seed, recent in self._recent.items()}

    def restore(self, state: dict[str, list[bool]]) -> None:
        """Take back a ``state()`` (a resumed job goes on where it stopped)."""
        self._recent = {
            int(seed): deque(recent, maxlen=self.window) for seed, recent in state.items()
        }

    def held_back(self) -> int:
        """Seeds whose recent groups were all flat (played at the floor's rate)."""
        return sum(len(r) == self.window and all(r) for r in self._recent.values())
