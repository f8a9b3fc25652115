"""GuessNumber: find a hidden integer with higher/lower feedback. No sandbox.

The default task of the built-in RL demo, sized for a ~3M-parameter model on a CPU: a small
range (1..16 by default, binary search needs at most 5 guesses), a short turn limit (6,
from the registration's ``max_episode_steps``) and short messages::

    system     Guess my number from 1 to 16. Reply with one number.
    user       Guess a number from 1 to 16.
    assistant  8
    user       Higher.
    assistant  12
    user       Correct!

A message must hold exactly one integer (ASCII digits) in the range; anything else is
rejected with feedback and costs ``invalid_penalty``. With ``strict=True`` the message must be
the number and nothing else (surrounding whitespace aside): "I guess 5" is rejected too. RL on
a small model needs that: text around the number that the reward ignores drifts freely
(docs/training.md). Finding the number pays
``1 - turn_cost * (turns - 1)``; running out of turns pays nothing (``truncated``).

With ``feedback="range"`` each verdict also names the range still open, so the last message
alone says where the number is ("Higher. From 5 to 8."): a small model that cannot carry
its earlier guesses forward can still play well (the built-in run's task; docs/training.md)::

    >>> env = GuessNumberEnv(low=1, high=8, feedback="range")
    >>> _ = env.reset(options={"task_id": "guess-6"})
    >>> env.step("4")[0][0]["content"], env.step("7")[0][0]["content"]
    ('Higher. From 5 to 8.', 'Lower. From 5 to 6.')

Task ids are ``"guess-<target>"``; ``reset(options={"task_id": "guess-7"})`` picks one.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from rollgym.envs import guess_verdict
from rollgym.envs.core import ChatEnv, Opening, Turn
from rollgym.envs.errors import ActionError, TaskNotFound
from rollgym.envs.messages import system, user

Verdict = Literal["higher", "lower", "correct", "invalid"]
Feedback = Literal["direction", "range"]
FEEDBACK: dict[Verdict, str] = {"higher": "Higher.", "lower": "Lower.", "correct": "Correct!"}
_INTEGER = re.compile(r"-?[0-9]+")


@dataclasses.dataclass(frozen=True)
class GuessStep:
    """One guess and the env's verdict (``"invalid"`` for a rejected message)."""

    guess: int | None
    verdict: Verdict


@dataclasses.dataclass(frozen=True)
class GuessEpisode:
    """The episode as the terminal reward sees it."""

    found: bool
    turns: int


@dataclasses.dataclass(frozen=True)
class GuessStepReward:
    """``-invalid_penalty`` for a rejected message, else 0."""

    invalid_penalty: float = 0.1

    def __call__(self, step: GuessStep) -> float:
        return -self.invalid_penalty if step.verdict == "invalid" else 0.0


@dataclasses.dataclass(frozen=True)
class GuessTerminalReward:
    """``1 - turn_cost * (turns - 1)`` when the number was found, else 0."""

    turn_cost: float = 0.05

    def __call__(self, episode: GuessEpisode) -> float:
        return 1.0 - self.turn_cost * (episode.turns - 1) if episode.found else 0.0


def parse_guess(text: str, low: int, high: int, *, strict: bool = False) -> int:
    """The one integer in ``text`` if it lies in ``[low, high]``; else ``ActionError``.

    ``strict``: ``text`` must be that integer alone (surrounding whitespace aside).
    """
    if strict and not _INTEGER.fullmatch(text.strip()):
        raise ActionError(f"Reply with the number only, from {low} to {high}.")
    numbers = _INTEGER.findall(text)
    if len(numbers) != 1:
        how = "no number" if not numbers else f"{len(numbers)} numbers"
        raise ActionError(f"Reply with exactly one number from {low} to {high} (got {how}).")
    digits = numbers[0]
    if len(digits.lstrip("-")) > 18 or not low <= int(digits) <= high:
        raise ActionError(f"Out of range: pick a number from {low} to {high}.")
    return int(digits)


def judge(guess: int, target: int) -> Verdict:
    """The verdict on a valid ``guess``."""
    if guess == target:
        return "correct"
    return "higher" if guess < target else "lower"


def task_ids(low: int, high: int) -> list[str]:
    """One task per target: ``"guess-<target>"``."""
    return [f"guess-{n}" for n in range(low, high + 1)]


def pick_target(options: dict[str, Any], rng: np.random.Generator, low: int, high: int) -> int:
    """The target ``options["task_id"]`` names, or one drawn from ``low..high`` with ``rng``."""
    if "task_id" not in options:
        return int(rng.integers(low, high + 1))
    if options["task_id"] not in task_ids(low, high):
        raise TaskNotFound(f"no task {options['task_id']!r} in {low}..{high}")
    return int(str(options["task_id"]).removeprefix("guess-"))


class GuessNumberEnv(ChatEnv[GuessStep, GuessEpisode]):
    """Find a hidden number in ``[low, high]``; see the module docstring."""

    def __init__(
        self,
        *,
        low: int = 1,
        high: int = 16,
        step_reward: Callable[[GuessStep], float] | None = None,
        terminal_reward: Callable[[GuessEpisode], float] | None = None,
        strict: bool = False,
        feedback: Feedback = "direction",
    ):
        if low > high:
            raise ValueError(f"low ({low}) must be <= high ({high})")
        if feedback not in ("direction", "range"):
            raise ValueError(f"feedback must be 'direction' or 'range', got {feedback!r}")
        super().__init__(
            step_reward=step_reward or GuessStepReward(),
            terminal_reward=terminal_reward or GuessTerminalReward(),
            max_action_chars=4_000,
        )
        self.low, self.high, self.strict, self.feedback = low, high, strict, feedback
        self._target = low
        self._open_range = (low, high)
        self._found = False

    def task_ids(self) -> list[str]:
        return task_ids(self.low, self.high)

    def _open(self, options: dict[str, Any]) -> Opening:
        self._target = pick_target(options, self.np_random, self.low, self.high)
        self._found = False
        self._open_range = (self.low, self.high)
        span = f"from {self.low} to {self.high}"
        return Opening(
            task_id=f"guess-{self._target}",
            messages=(
                system(f"Guess my number {span}. Reply with one number."),
                user(f"Guess a number {span}."),
            ),
        )

    def _turn(self, action: str) -> Turn[GuessStep]:
        guess = parse_guess(action, self.low, self.high, strict=self.strict)
        verdict = judge(guess, self._target)
        self._found = verdict == "correct"
        reply = user(self._say(guess, verdict))
        return Turn((reply,), GuessStep(guess, verdict), terminated=self._found)

    def _say(self, guess: int, verdict: Verdict) -> str:
        """The verdict's words; with ``feedback="range"``, then the range still open (the
        words GuessTool's in-box program says: ``guess_verdict.verdict``)."""
        reply = guess_verdict.verdict(*self._open_range, self._target, guess)
        self._open_range = (reply["low"], reply["high"])
        if self.feedback == "direction":
            return FEEDBACK[verdict]
        return str(reply["reply"])

    def _rejected(self, error: str) -> GuessStep:
        return GuessStep(None, "invalid")

    def _episode(self) -> GuessEpisode:
        return GuessEpisode(found=self._found, turns=self.turns)
