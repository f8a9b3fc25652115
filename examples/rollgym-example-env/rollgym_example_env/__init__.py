"""Reverse: a plain Gymnasium text env, as a user writes it (no rollgym import needed).

The env shows a word; the agent must answer with the word spelled backwards. Observations
and actions are ``str`` (``spaces.Text``): rollgym adapts it to chat messages when it
serves it. Register it by installing this package (entry point group ``rollgym.envs``) or
by naming the module in the id: ``"rollgym_example_env:example/Reverse-v0"``.
"""

from __future__ import annotations

import string
from typing import Any

import gymnasium
from gymnasium import spaces

WORDS = ("stressed", "drawer", "gateman", "rollgym", "parts", "smart", "lived", "reward")


class ReverseEnv(gymnasium.Env[str, str]):
    """Spell the shown word backwards; 1.0 for a right answer, then the episode ends."""

    metadata = {"render_modes": []}  # noqa: RUF012 - Gymnasium's own attribute

    def __init__(self, words: tuple[str, ...] = WORDS):
        self.words = words
        # spaces.Text holds only alphanumerics unless given a charset: name the characters
        self.observation_space = spaces.Text(max_length=200, charset=string.printable)
        self.action_space = spaces.Text(max_length=200, charset=string.printable)
        self._word = words[0]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self._word = self.words[int(self.np_random.integers(len(self.words)))]
        return f"Spell this word backwards: {self._word}", {"task_id": self._word}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        right = action.strip().lower() == self._word[::-1]
        feedback = "Correct." if right else "Wrong, try again."
        return feedback, float(right), right, False, {}


def register() -> None:
    """Called by rollgym through the entry point; also fine to call yourself."""
    if "example/Reverse-v0" not in gymnasium.registry:
        gymnasium.register(
            "example/Reverse-v0",
            entry_point="rollgym_example_env:ReverseEnv",
            max_episode_steps=3,
        )


register()
