"""Progress rewards: pay each step for how much the best fraction of a goal improved.

PythonTests (the fraction of hidden tests passing) and Shell (the fraction of checks
holding) score the same way: the return of an episode is the best fraction it reached
(1.0 = solved), whether it terminated or was truncated, and a rejected message costs
``invalid_penalty``. A step that repeats or falls back earns nothing; nothing is taken
away for it, so trying is never worse than stopping.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class ProgressStep:
    """One attempt: the fraction of the goal it reached, and the best fraction before it."""

    fraction: float
    best_before: float
    valid: bool = True


@dataclasses.dataclass(frozen=True)
class ProgressEpisode:
    """What a terminal reward sees: the best fraction reached, in how many attempts."""

    best_fraction: float
    attempts: int


@dataclasses.dataclass(frozen=True)
class ProgressReward:
    """``max(0, fraction - best_before)``, minus ``invalid_penalty`` for a rejected message."""

    invalid_penalty: float = 0.05

    def __call__(self, step: ProgressStep) -> float:
        if not step.valid:
            return -self.invalid_penalty
        return max(0.0, step.fraction - step.best_before)
