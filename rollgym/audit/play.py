"""One env played by a scripted attacker, every step checked for what would cross.

``Play`` wraps ``reset``/``step`` of an env made for the audit. An attacker calls
``act(action)``: a finished episode is reset first (same seed: same task), and the step's
outcome is checked for the crossings every attack shares:

* ``step`` or ``reset`` raised (the server counts a crashing env as an infrastructure
  failure), or ``info["failure"] == "infra"``: an agent's text chose its episode's kind;
* an observation that is not bounded, valid text (``MAX_OBSERVATION_CHARS``, no NUL, no
  lone surrogate): what the model would be trained on next;
* a non-finite reward.

Attacks add their own (``crossed``); ``paid_as_solved`` tells whether an episode ended on a
step that paid a positive reward.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import gymnasium

MAX_OBSERVATION_CHARS = 100_000
_LONE_SURROGATE = range(0xD800, 0xE000)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One step as the attacker saw it; ``text`` is every message's content, joined."""

    text: str
    reward: float
    terminated: bool
    truncated: bool
    failure: str | None

    @property
    def paid_as_solved(self) -> bool:
        return self.terminated and self.reward > 0


class Play:
    """See the module docstring. ``crossings`` collects what crossed, one line each."""

    def __init__(self, env: gymnasium.Env[Any, str], seed: int):
        self.env, self.seed = env, seed
        self.crossings: list[str] = []
        self.attempts = 0
        self.opening = ""
        self._running = False

    def reset(self) -> str:
        """A new episode on the seed's task; its opening messages' text."""
        self._running = False
        try:
            obs, _ = self.env.reset(seed=self.seed)
        except Exception as exc:  # the previous episode's actions must not break the next
            self.crossings.append(f"reset raised {exc!r}"[:300])
            return ""
        self._running = True
        self.opening = self._checked(obs, "reset")
        return self.opening

    def act(self, action: str, what: str) -> Outcome | None:
        """Step with ``action`` (``what`` names it in a crossing); None if the env broke."""
        if not self._running:
            self.reset()
            if not self._running:
                return None
        self.attempts += 1
        try:
            obs, reward, terminated, truncated, info = self.env.step(action)
        except Exception as exc:
            self.crossings.append(f"{what}: step raised {exc!r}"[:300])
            self._running = False
            return None
        failure = info.get("failure") if isinstance(info, dict) else None
        if failure == "infra":
            error = info.get("error") if isinstance(info, dict) else None
            self.crossings.append(f"{what}: an infrastructure failure ({error})"[:300])
        if not math.isfinite(reward):
            self.crossings.append(f"{what}: a reward of {reward}")
        text = self._checked(obs, what)
        if terminated or truncated:
            self._running = False
        return Outcome(text, float(reward), bool(terminated), bool(truncated), failure)

    def close(self) -> None:
        try:
            self.env.close()
        except Exception as exc:
            self.crossings.append(f"close raised {exc!r}"[:300])

    def _checked(self, obs: object, what: str) -> str:
        """The observation's text; a crossing if it is not bounded, valid text."""
        contents = [m.get("content") if isinstance(m, dict) else m for m in obs or ()]  # type: ignore[attr-defined]
        texts = [c for c in contents if isinstance(c, str)]
        if len(texts) != len(contents):
            self.crossings.append(f"{what}: an observation that is not text")
            return ""
        text = "\n".join(texts)
        if len(text) > MAX_OBSERVATION_CHARS:
            self.crossings.append(f"{what}: an observation of {len(text)} characters")
        elif "\x00" in text or any(ord(c) in _LONE_SURROGATE for c in text):
            self.crossings.append(f"{what}: an observation with a NUL or a lone surrogate")
        return text
