"""Reading what the agent wrote, with bounds: JSON depth and size, text encoding.

Anything an agent's text can make the host do is the agent's doing, so it must end as a
task failure (feedback, trained on), never as an exception that the runner counts as an
infrastructure failure: an agent that could pick which of its episodes are excluded could
veto its losing groups. Python's parsers have limits of their own that end in the wrong
exception (``json.loads`` of 5,000 nested brackets raises ``RecursionError``), and text
that parses can still be unusable downstream (a ``"\\u0000"`` or a lone ``"\\ud800"`` in a
JSON string reaches a shell or a file system that refuses it). This module reads the
agent's JSON under explicit bounds and says what is wrong in words the agent can act on,
as ``Untrusted`` (a ``ValueError``); envs turn it into ``ActionError`` feedback.

>>> load_json('{"a": [1, 2]}')
{'a': [1, 2]}
>>> load_json("[" * 100 + "]" * 100)
Traceback (most recent call last):
...
rollgym.envs.untrusted.Untrusted: the JSON is nested 100 deep; at most 32 levels are read
>>> text_problem({"path": "a\\x00b"})
"'path' holds a NUL character"
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 32
"""Levels of ``[``/``{`` nesting read; far below what makes Python's parsers recurse out."""

MAX_JSON_CHARS = 1_000_000
"""Characters of one JSON text read (an env's action limit is usually much lower)."""

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class Untrusted(ValueError):
    """The agent's text is outside the bounds; the message says which."""


def json_depth(text: str) -> int:
    """The deepest nesting of ``[`` and ``{`` in ``text``, brackets in strings not counted.

    Linear in ``len(text)``, no recursion: safe on any input.

    >>> json_depth('{"a": ["[[[", {"b": 1}]}'), json_depth("7")
    (3, 0)
    """
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def load_json(text: str, *, max_depth: int = MAX_DEPTH, max_chars: int = MAX_JSON_CHARS) -> Any:
    """``text`` parsed as strict JSON (no NaN or Infinity) within the bounds, or ``Untrusted``."""
    if len(text) > max_chars:
        raise Untrusted(f"the JSON has {len(text)} characters; at most {max_chars} are read")
    depth = json_depth(text)
    if depth > max_depth:
        raise Untrusted(f"the JSON is nested {depth} deep; at most {max_depth} levels are read")
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise Untrusted(f"{exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except (ValueError, RecursionError, MemoryError) as exc:  # int digits, our constants...
        raise Untrusted(str(exc) or type(exc).__name__) from None


def text_problem(value: Any, where: str = "") -> str | None:
    """What makes ``value`` (parsed JSON) unusable as text: a NUL or a lone surrogate in one
    of its strings, keys included; None when there is none.

    No file system, shell command or source file holds a NUL, and a lone surrogate cannot be
    encoded as UTF-8 at all: both would fail far from the agent, in the box's executor.
    """
    if isinstance(value, str):
        name = where or "the text"
        if "\x00" in value:
            return f"{name} holds a NUL character"
        if _LONE_SURROGATE.search(value):
            return f"{name} holds a lone surrogate (not valid Unicode text)"
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            found = text_problem(key, f"a key of {where or 'the object'}") or text_problem(
                item, f"{where}.{key}" if where else repr(key)
            )
            if found:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            if found := text_problem(item, f"{where or 'the list'}[{index}]"):
                return found
    return None


def _reject_constant(constant: str) -> Any:
    raise ValueError(f"{constant} is not valid JSON")
