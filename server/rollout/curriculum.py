"""A curriculum over tasks: tasks whose recent groups were all solved or all failed are played
less, never dropped.

A group whose rewards are all equal (every sample solved the task, or none did) has zero
advantage everywhere and teaches GRPO nothing (DAPO's dynamic sampling drops such groups
after paying for them; prime-rl keeps difficulty pools). ``Curriculum`` remembers, per task,
whether each of its last ``window`` groups was flat; when the sampler draws a task whose
recent groups were all flat, it is played only with probability ``floor``, so it still comes
back now and then: a solved task is re-checked, an unsolved one retried as the policy
improves.

    P(play task) = floor   if its last `window` groups were all flat
                   1       otherwise (or fewer than `window` groups seen)

A task is an env of the job (its index in the mixture, 0 without one) and a seed: seed 7 of
an easy env and seed 7 of a hard one are two tasks, so the easy env's solved seeds hold back
that env alone.

>>> import random
>>> curriculum = Curriculum(window=2, floor=0.0, rng=random.Random(0))
>>> curriculum.observe((0, 7), flat=True); curriculum.admits((0, 7))
True
>>> curriculum.observe((0, 7), flat=True); curriculum.admits((0, 7)), curriculum.admits((1, 7))
(False, True)
>>> curriculum.observe((0, 7), flat=False); curriculum.admits((0, 7))
True

The runner keeps its memory beside the persisted job (``state``/``restore``), so a server
that restarts resumes the job with the curriculum where it stopped.
"""

from __future__ import annotations

import random
from collections import deque

Task = tuple[int, int]  # (the env's index in the job's mixture, the seed)


class Curriculum:
    """Per-task memory of flat groups and the admission rule above."""

    def __init__(self, *, window: int, floor: float, rng: random.Random) -> None:
        if window < 1 or not 0 <= floor <= 1:
            raise ValueError("a curriculum needs window >= 1 and 0 <= floor <= 1")
        self.window = window
        self.floor = floor
        self._rng = rng
        self._recent: dict[Task, deque[bool]] = {}

    def observe(self, task: Task, *, flat: bool) -> None:
        """A finished group of ``task``: were its rewards all equal?"""
        self._recent.setdefault(task, deque(maxlen=self.window)).append(flat)

    def admits(self, task: Task) -> bool:
        """Whether to play ``task`` now (draws from the rng only for a task held back)."""
        recent = self._recent.get(task)
        if recent is None or len(recent) < self.window or not all(recent):
            return True
        return self._rng.random() < self.floor

    def state(self) -> dict[str, list[bool]]:
        """Its memory, as JSON can hold it: ``"env/seed"`` keys (``restore`` takes it back)."""
        return {f"{env}/{seed}": list(recent) for (env, seed), recent in self._recent.items()}

    def restore(self, state: dict[str, list[bool]]) -> None:
        """Take back a ``state()`` (a resumed job goes on where it stopped)."""
        self._recent = {
            _task(key): deque(recent, maxlen=self.window) for key, recent in state.items()
        }


def _task(key: str) -> Task:
    env, _, seed = key.rpartition("/")  # a memory saved before mixtures had seeds alone: env 0
    return int(env or 0), int(seed)
