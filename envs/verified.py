"""Rewards of an env whose verifier scores the episode once, at its end.

Dataset rows (``envs.dataset``) and Harbor tasks (``envs.harbor``) pay the same way: a
step earns nothing, except that a rejected message costs ``invalid_penalty``; the step
that ends the episode pays the verifier's score of it (a data set's verifier scores 0 to
1, a Harbor task's tests write their own number).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class VerifiedStep:
    """One message: whether it was valid."""

    valid: bool = True


@dataclasses.dataclass(frozen=True)
class VerifiedEpisode:
    """What the terminal reward sees: the verifier's score."""

    score: float


@dataclasses.dataclass(frozen=True)
class VerifiedStepReward:
    """0 a step, ``-invalid_penalty`` for a rejected message."""

    invalid_penalty: float = 0.05

    def __call__(self, step: VerifiedStep) -> float:
        return 0.0 if step.valid else -self.invalid_penalty


@dataclasses.dataclass(frozen=True)
class VerifierScore:
    """The verifier's score of the episode."""

    def __call__(self, episode: VerifiedEpisode) -> float:
        return episode.score
