"""GuessNumber policies and demonstrations for SFT warm-start.

``GuessPolicy(low, high)`` is the oracle: binary search over the range the feedback so far
leaves open. With ``noise > 0`` each guess is, with that probability, a wasteful one instead
of the midpoint: a random number from the open range (``style="random"``) or its lowest
number (``style="lowest"``, linear search). Both are still valid play (never a guess the
feedback has ruled out), just slower, so there is room for RL to improve on it.

``demonstrations(n, seed=0, noise=0.0)`` plays ``n`` episodes of the real env with that
policy and returns each whole conversation (opening messages, then the assistant's guess
and the env's feedback for every turn)::

    >>> convs = demonstrations(2, seed=0)
    >>> [m["role"] for m in convs[0]][:4]
    ['system', 'user', 'assistant', 'user']
    >>> convs[0][-1]["content"]
    'Correct!'
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Literal

import gymnasium

from rollgym.envs.errors import ActionError
from rollgym.envs.guess_number import FEEDBACK, parse_guess
from rollgym.envs.messages import Message, assistant

GUESS_NUMBER_ID = "rollgym/GuessNumber-v0"
_HIGHER, _LOWER = FEEDBACK["higher"], FEEDBACK["lower"]
NoiseStyle = Literal["random", "lowest"]


class GuessPolicy:
    """Binary search over the still-open range; ``noise`` of the guesses wasteful (``style``)."""

    def __init__(
        self,
        low: int = 1,
        high: int = 16,
        *,
        noise: float = 0.0,
        style: NoiseStyle = "random",
        seed: int | None = None,
    ):
        if not 0.0 <= noise <= 1.0:
            raise ValueError(f"noise must be in [0, 1], got {noise}")
        if style not in ("random", "lowest"):
            raise ValueError(f"style must be 'random' or 'lowest', got {style!r}")
        self.low, self.high, self.noise, self.style = low, high, noise, style
        self._rng = random.Random(seed)

    def open_range(self, history: Sequence[Message]) -> tuple[int, int]:
        """The range the conversation's feedback leaves open."""
        low, high, guess = self.low, self.high, None
        for message in history:
            if message["role"] == "assistant":
                guess = _guess_or_none(message["content"], self.low, self.high)
            elif guess is not None and message["content"] == _HIGHER:
                low = max(low, guess + 1)
            elif guess is not None and message["content"] == _LOWER:
                high = min(high, guess - 1)
        return low, high

    def __call__(self, history: Sequence[Message]) -> str:
        """The next message (a number) given the conversation so far."""
        low, high = self.open_range(history)
        if high < low:  # feedback contradicts itself: no valid guess is left
            raise ValueError(f"no number is consistent with the feedback ({low}..{high})")
        if self.noise and self._rng.random() < self.noise:
            return str(self._rng.randint(low, high) if self.style == "random" else low)
        return str((low + high) // 2)


def _guess_or_none(text: str, low: int, high: int) -> int | None:
    """The guess a message made, or None for a message the env rejected."""
    try:
        return parse_guess(text, low, high)
    except ActionError:
        return None


def demonstrations(
    n: int,
    *,
    seed: int = 0,
    noise: float = 0.0,
    style: NoiseStyle = "random",
    low: int = 1,
    high: int = 16,
    max_turns: int = 6,
) -> list[list[Message]]:
    """``n`` whole GuessNumber conversations played by ``GuessPolicy(noise=noise, style=style)``.

    Episode ``i`` is reset with seed ``seed + i``, so the set is reproducible. With noise,
    some episodes may run out of turns; they are kept (valid, unsuccessful play).
    """
    policy = GuessPolicy(low, high, noise=noise, style=style, seed=seed)
    env = gymnasium.make(GUESS_NUMBER_ID, low=low, high=high, max_episode_steps=max_turns)
    conversations = []
    try:
        for i in range(n):
            observation, _ = env.reset(seed=seed + i)
            history = list(observation)
            done = False
            while not done:
                action = policy(history)
                observation, _, terminated, truncated, _ = env.step(action)
                history += [assistant(action), *observation]
                done = terminated or truncated
            conversations.append(history)
    finally:
        env.close()
    return conversations
