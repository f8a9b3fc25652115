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

import itertools
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import gymnasium

from rollgym.envs.errors import ActionError
from rollgym.envs.guess_number import FEEDBACK, parse_guess
from rollgym.envs.messages import Message, assistant

GUESS_NUMBER_ID = "rollgym/GuessNumber-v0"
_HIGHER, _LOWER = FEEDBACK["higher"], FEEDBACK["lower"]
NoiseStyle = Literal["random", "lowest"]
DrillTurns = Literal["last", "later"]


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
            elif guess is not None and message["content"].startswith(_HIGHER):
                low = max(low, guess + 1)
            elif guess is not None and message["content"].startswith(_LOWER):
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
    env_kwargs: Mapping[str, Any] | None = None,
) -> list[list[Message]]:
    """``n`` whole GuessNumber conversations played by ``GuessPolicy(noise=noise, style=style)``.

    Episode ``i`` is reset with seed ``seed + i``, so the set is reproducible. With noise,
    some episodes may run out of turns; they are kept (valid, unsuccessful play).
    ``env_kwargs`` go to the env beside the range (``strict``, ``feedback``).
    """
    policy = GuessPolicy(low, high, noise=noise, style=style, seed=seed)
    env = _env(low, high, max_turns, env_kwargs)
    try:
        return [_play(env, seed + i, lambda history, turn: policy(history)) for i in range(n)]
    finally:
        env.close()


def drills(
    n: int,
    *,
    seed: int = 0,
    low: int = 1,
    high: int = 16,
    max_turns: int = 6,
    env_kwargs: Mapping[str, Any] | None = None,
    turns: DrillTurns = "last",
) -> list[list[dict[str, Any]]]:
    """``n`` conversations that teach late turns only, from any position.

    Some guesses drawn anywhere in the range, each marked ``weight`` 0 (OpenAI's flag:
    context, not trained on), then the oracle's guesses, trained, in whatever range they
    left open. ``turns="last"``: ``max_turns - 1`` random guesses, so only the last turn is
    taught; ``"later"``: 1 to ``max_turns - 1`` of them (uniformly), so every turn but the
    first is. Whole games reach the late positions of binary search rarely (a position
    after two good guesses is ~1% of them), and a small model fitted on them reads the
    range there poorly; drills show every such position without teaching the opening. A
    game a random guess wins before the oracle's turn teaches nothing and is skipped.
    """
    if turns not in ("last", "later"):
        raise ValueError(f"turns must be 'last' or 'later', got {turns!r}")
    oracle, rng = GuessPolicy(low, high), random.Random(seed)
    env = _env(low, high, max_turns, env_kwargs)
    out: list[list[dict[str, Any]]] = []
    try:
        for game_seed in itertools.count(seed):
            if len(out) == n:
                break
            random_turns = max_turns - 1 if turns == "last" else rng.randint(1, max_turns - 1)

            def guess(history: Sequence[Message], turn: int, k: int = random_turns) -> str:
                return oracle(history) if turn >= k else str(rng.randint(low, high))

            history = _play(env, game_seed, guess)
            moves = [i for i, m in enumerate(history) if m["role"] == "assistant"]
            if len(moves) > random_turns:  # a trained turn was reached
                early = set(moves[:random_turns])
                out.append(
                    [_untrained(m) if i in early else dict(m) for i, m in enumerate(history)]
                )
    finally:
        env.close()
    return out


def endgames(
    n: int,
    *,
    seed: int = 0,
    low: int = 1,
    high: int = 16,
    max_turns: int = 6,
    env_kwargs: Mapping[str, Any] | None = None,
    tries: int = 1000,
) -> list[list[dict[str, Any]]]:
    """``n`` conversations that teach the end game: one number left, and it is guessed.

    Conversation ``i`` hides the number ``low + i % size``, so every number is drilled
    equally: untrained random guesses (``weight`` 0) from the open range, never the number,
    until the feedback leaves it alone ("Higher. From 8 to 8."), then the number, trained.
    Binary search ends in such a range for most targets, and a small model copies its last
    guess there rather than reading the range; random play reaches the middle numbers' end
    games rarely (a guess either side of them). A number whose end game ``tries`` random
    prefixes do not reach within ``max_turns`` raises ``ValueError``.

        >>> game = endgames(8, seed=0, low=1, high=8, max_turns=3)[5]
        >>> [(m["content"], m.get("weight")) for m in game[2:] if m["role"] == "assistant"][-1]
        ('6', None)
    """
    oracle, rng, size = GuessPolicy(low, high), random.Random(seed), high - low + 1
    env = _env(low, high, max_turns, env_kwargs)
    out: list[list[dict[str, Any]]] = []
    try:
        for i in range(n):
            number = low + i % size
            for _ in range(tries):
                history = _endgame(env, oracle, rng, number, seed + i)
                if history is not None:
                    out.append(history)
                    break
            else:
                raise ValueError(f"no end game of {number} within {max_turns} turns")
    finally:
        env.close()
    return out


def _endgame(
    env: gymnasium.Env[Any, Any], oracle: GuessPolicy, rng: random.Random, number: int, seed: int
) -> list[dict[str, Any]] | None:
    """One try at ``number``'s end game: the drill, or None if the turns ran out first."""

    def guess(history: Sequence[Message], turn: int) -> str:
        low, high = oracle.open_range(history)
        if low == high:  # the random guesses never name the number: it is alone now
            return str(number)
        return str(rng.choice([g for g in range(low, high + 1) if g != number]))

    history = _play(env, seed, guess, options={"task_id": f"guess-{number}"})
    moves = [i for i, m in enumerate(history) if m["role"] == "assistant"]
    if history[moves[-1]]["content"] != str(number):
        return None
    return [_untrained(m) if i in moves[:-1] else dict(m) for i, m in enumerate(history)]


def _untrained(message: Message) -> dict[str, Any]:
    return {**message, "weight": 0}


def _env(
    low: int, high: int, max_turns: int, env_kwargs: Mapping[str, Any] | None
) -> gymnasium.Env[Any, Any]:
    return gymnasium.make(
        GUESS_NUMBER_ID, low=low, high=high, max_episode_steps=max_turns, **(env_kwargs or {})
    )


def _play(
    env: gymnasium.Env[Any, Any],
    seed: int,
    guess: Callable[[Sequence[Message], int], str],
    *,
    options: Mapping[str, Any] | None = None,
) -> list[Message]:
    """One whole game: ``guess(history, turn)`` makes each move (``options``: the reset's)."""
    observation, _ = env.reset(seed=seed, options=dict(options or {}))
    history = list(observation)
    done, turn = False, 0
    while not done:
        action = guess(history, turn)
        observation, _, terminated, truncated, _ = env.step(action)
        history += [assistant(action), *observation]
        done, turn = terminated or truncated, turn + 1
    return history
