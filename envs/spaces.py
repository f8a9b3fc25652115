"""Spaces for chat environments: free text and tuples of chat messages.

Gymnasium's ``spaces.Text`` only holds characters of a fixed charset (alphanumerics by
default) and at least one character; real model output is any Unicode, often empty. So:

* ``ChatText``: any ``str`` up to ``max_length`` characters, the empty string included.
  Samples mix ASCII, whitespace, accents, CJK, emoji, right-to-left and zero-width text.
* ``Messages``: a tuple of ``{"role", "content"}`` dicts, roles from a fixed set, contents
  in a ``ChatText``.

>>> space = ChatText(max_length=10)
>>> "" in space, "héllo 👋" in space, "x" * 11 in space
(True, True, False)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from rollgym.envs.messages import ROLES, Message, Observation

# Representative characters of real model output, all encodable as UTF-8.
_PALETTE = (
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    " \t\n.,;:!?'\"`()[]{}<>/\\|@#$%^&*-_=+~"
    "éèüñçßøÅ"  # Latin accents
    "中文字日本語한국어"  # CJK
    "😀👍🚀🧪"  # emoji (astral plane)
    "עברית عربي"  # right-to-left
    "\u200b\u200d\u0301\ufeff"  # zero-width space/joiner, combining accent, BOM
)


class ChatText(spaces.Space[str]):
    """Any text up to ``max_length`` characters (the empty string included)."""

    def __init__(self, max_length: int = 100_000, *, seed: int | np.random.Generator | None = None):
        if max_length < 0:
            raise ValueError(f"max_length must be >= 0, got {max_length}")
        self.max_length = max_length
        super().__init__(dtype=str, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any | None = None, probability: Any | None = None) -> str:
        """Random text of random length (at most 64 characters) from a mixed palette."""
        if mask is not None or probability is not None:
            raise ValueError("ChatText.sample takes no mask or probability")
        length = int(self.np_random.integers(0, min(self.max_length, 64) + 1))
        picks = self.np_random.integers(0, len(_PALETTE), size=length)
        return "".join(_PALETTE[i] for i in picks)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def to_jsonable(self, sample_n: Iterable[str]) -> list[str]:
        return list(sample_n)

    def from_jsonable(self, sample_n: list[Any]) -> list[str]:
        return [str(s) for s in sample_n]

    def __repr__(self) -> str:
        return f"ChatText(max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ChatText) and other.max_length == self.max_length


class Messages(spaces.Space[Observation]):
    """Tuples of chat messages whose roles are in ``roles`` and contents in ``content``."""

    def __init__(
        self,
        content: ChatText | None = None,
        *,
        roles: Sequence[str] = ROLES,
        max_messages: int = 64,
        seed: int | np.random.Generator | None = None,
    ):
        self.content = content if content is not None else ChatText()
        self.roles = tuple(roles)
        self.max_messages = max_messages
        super().__init__(dtype=object, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def seed(self, seed: int | None = None) -> int | Any:
        seeded = super().seed(seed)
        self.content.seed(int(self.np_random.integers(2**31)))
        return seeded

    def sample(self, mask: Any | None = None, probability: Any | None = None) -> Observation:
        if mask is not None or probability is not None:
            raise ValueError("Messages.sample takes no mask or probability")
        count = int(self.np_random.integers(0, min(self.max_messages, 3) + 1))
        return tuple(self._sample_message() for _ in range(count))

    def _sample_message(self) -> Message:
        role = self.roles[int(self.np_random.integers(len(self.roles)))]
        return {"role": role, "content": self.content.sample()}

    def contains(self, x: Any) -> bool:
        return (
            isinstance(x, tuple)
            and len(x) <= self.max_messages
            and all(self._is_message(m) for m in x)
        )

    def _is_message(self, m: Any) -> bool:
        return (
            isinstance(m, dict)
            and m.keys() == {"role", "content"}
            and m["role"] in self.roles
            and m["content"] in self.content
        )

    def to_jsonable(self, sample_n: Iterable[Observation]) -> list[list[dict[str, str]]]:
        return [[{"role": m["role"], "content": m["content"]} for m in obs] for obs in sample_n]

    def from_jsonable(self, sample_n: list[Any]) -> list[Observation]:
        return [
            tuple({"role": m["role"], "content": m["content"]} for m in obs) for obs in sample_n
        ]

    def __repr__(self) -> str:
        return f"Messages(roles={self.roles}, content={self.content!r}, max_messages={self.max_messages})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Messages)
            and other.content == self.content
            and other.roles == self.roles
            and other.max_messages == self.max_messages
        )
