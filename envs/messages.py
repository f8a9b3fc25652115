"""Chat messages: what an environment shows the agent.

An observation is a tuple of messages, each a plain ``{"role": ..., "content": ...}`` dict
(the shape chat templates and the OpenAI API take). ``reset`` returns the opening messages
(system + first user message); ``step`` returns only the messages this turn appends.

Text that comes from a sandbox or echoes the agent passes through ``clean_text`` (no control
bytes, no lone surrogates) and ``clip_text`` (bounded length), so every message stays valid
UTF-8 text of a known maximum size whatever the agent did.
"""

from __future__ import annotations

import re
from typing import Literal, TypedDict

Role = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[Role, ...] = ("system", "user", "assistant", "tool")


class Message(TypedDict):
    """One chat message."""

    role: str
    content: str


Observation = tuple[Message, ...]

# C0/C1 control characters other than tab, newline and carriage return, and lone surrogates
# (which cannot be encoded as UTF-8): what "binary garbage" turns into after decoding.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")


def message(role: Role, content: str) -> Message:
    return {"role": role, "content": content}


def system(content: str) -> Message:
    return message("system", content)


def user(content: str) -> Message:
    return message("user", content)


def assistant(content: str) -> Message:
    return message("assistant", content)


def tool(content: str) -> Message:
    return message("tool", content)


def clean_text(text: str) -> str:
    """Replace control characters and lone surrogates with U+FFFD (keeps tab and newlines)."""
    return _UNPRINTABLE.sub("\ufffd", text)


def clip_text(text: str, limit: int) -> str:
    """Cut ``text`` to at most ``limit`` characters, saying how much was cut.

    >>> clip_text("abcdefghijklmnopqrstuvwxyz" * 4, 60)
    'abcdefghijklmnopqrstuvwxyzabcde\\n[... 73 more characters cut]'
    """
    if len(text) <= limit:
        return text
    note = f"\n[... {len(text) - limit} more characters cut]"
    keep = max(limit - len(note), 0)
    note = f"\n[... {len(text) - keep} more characters cut]"
    return text[:keep] + note[: limit - keep]


def first_bad_char(text: str) -> int | None:
    """Index of the first lone surrogate in ``text`` (not encodable as UTF-8), or None."""
    found = re.search("[\ud800-\udfff]", text)
    return None if found is None else found.start()
