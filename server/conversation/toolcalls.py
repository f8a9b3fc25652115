"""Tool calls out of a completion's text, in the format the served chat templates teach.

Both models the project serves call a tool by writing a tagged JSON object (Qwen2/Hermes
style) after any text of their own::

    Let me compute it.
    <tool_call>{"name": "calculator", "arguments": {"expression": "2 + 3"}}</tool_call>

The default model's chat template teaches that format; SmolLM2's ignores tools, so
``ChatCodec`` lists them in the system message in the same format (``tool_instructions``).

``parse_tool_calls`` is all or nothing: when every tagged block is a JSON object naming a
declared tool, with ``arguments`` an object (or a JSON text of one, as a template that
renders OpenAI's ``arguments`` strings shows them), the text outside the blocks is the
content and the blocks are the calls; otherwise the whole text is content and there are no
calls, so the client sees what the model wrote. Parsing only shapes the answer: the
sampled token ids are recorded as they are.

>>> parse_tool_calls('Hi <tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>', {"f"})
ParsedReply(content='Hi', calls=[ParsedCall(name='f', arguments='{"x": 1}')])
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Collection
from typing import Any

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(re.escape(OPEN) + r"(.*?)" + re.escape(CLOSE), re.DOTALL)


@dataclasses.dataclass(frozen=True)
class ParsedCall:
    name: str
    arguments: str  # a JSON object's text, as OpenAI sends it


@dataclasses.dataclass(frozen=True)
class ParsedReply:
    content: str | None  # None when the model wrote nothing but calls
    calls: list[ParsedCall]


def parse_tool_calls(text: str, tool_names: Collection[str]) -> ParsedReply:
    """``text`` as content and tool calls of the tools named ``tool_names`` (see above)."""
    as_text = ParsedReply(content=text, calls=[])
    if text.count(OPEN) != text.count(CLOSE) or not text.count(OPEN):
        return as_text
    calls = [_call(body, tool_names) for body in _BLOCK.findall(text)]
    if not calls or any(call is None for call in calls):
        return as_text
    content = _BLOCK.sub("", text).strip()
    return ParsedReply(content=content or None, calls=[c for c in calls if c is not None])


def _call(body: str, tool_names: Collection[str]) -> ParsedCall | None:
    payload = _json(body)
    if not isinstance(payload, dict) or set(payload) != {"name", "arguments"}:
        return None
    name, arguments = payload["name"], payload["arguments"]
    if isinstance(arguments, str):
        arguments = _json(arguments)
    if not isinstance(name, str) or name not in tool_names or not isinstance(arguments, dict):
        return None
    return ParsedCall(name=name, arguments=json.dumps(arguments, ensure_ascii=False))


def _json(text: str) -> Any:
    """The JSON value of ``text``, or None if it is not JSON (NaN and Infinity are not)."""
    try:
        return json.loads(text, parse_constant=_refuse)
    except ValueError:  # JSONDecodeError included
        return None


def _refuse(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")
