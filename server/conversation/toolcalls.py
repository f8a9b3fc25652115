"""Tool calls out of a completion's text, read by vLLM's parser of the served model's family.

The server's ``tool_parser`` setting names vLLM's parser of the served model's family
(``envs.toolformats.ToolCallParser``; default ``hermes``, the format the default model's
template teaches, and the one ``ChatCodec`` lists in the system message for templates that
ignore tools)::

    Let me compute it.
    <tool_call>{"name": "calculator", "arguments": {"expression": "2 + 3"}}</tool_call>

Reading is all or nothing: when vLLM's parser finds calls and every one names a declared
tool with ``arguments`` a JSON object (or a JSON text of one, as a template that renders
OpenAI's ``arguments`` strings shows them), its content and calls are the answer; otherwise
the whole text is content and there are no calls, so the client sees what the model wrote.
Parsing only shapes the answer: the sampled token ids are recorded as they are.

>>> parse_tool_calls('Hi <tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>', {"f"})
ParsedReply(content='Hi', calls=[ParsedCall(name='f', arguments='{"x": 1}')])
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection, Sequence
from typing import Any

from rollgym.envs.toolformats import ToolCallParser, hermes


@dataclasses.dataclass(frozen=True)
class ParsedCall:
    name: str
    arguments: str  # a JSON object's text, as OpenAI sends it


@dataclasses.dataclass(frozen=True)
class ParsedReply:
    content: str | None  # None when the model wrote nothing but calls
    calls: list[ParsedCall]


def read_tool_calls(
    text: str, tools: Sequence[dict[str, Any]], parser: ToolCallParser
) -> ParsedReply:
    """``text`` as content and calls of ``tools`` (OpenAI tool dicts) read by ``parser``,
    all or nothing (see above)."""
    as_text = ParsedReply(content=text, calls=[])
    names = {tool["function"]["name"] for tool in tools}
    read = parser.read(text, tools)
    calls = [_call(name, arguments, names) for name, arguments in read.calls]
    if not calls or any(call is None for call in calls):
        return as_text
    content = (read.content or "").strip()
    return ParsedReply(content=content or None, calls=[c for c in calls if c is not None])


def parse_tool_calls(
    text: str, tool_names: Collection[str], *, parser: ToolCallParser | None = None
) -> ParsedReply:
    """``read_tool_calls`` of the tools named ``tool_names`` (default: the Hermes family's
    parser)."""
    tools = [{"type": "function", "function": {"name": name}} for name in tool_names]
    return read_tool_calls(text, tools, parser or hermes())


def _call(name: str, arguments: str, tool_names: Collection[str]) -> ParsedCall | None:
    """The call if it names a declared tool with a JSON object (or a JSON text of one)."""
    value = _json(arguments)
    if isinstance(value, str):
        value = _json(value)
    if name not in tool_names or not isinstance(value, dict):
        return None
    return ParsedCall(name=name, arguments=json.dumps(value, ensure_ascii=False))


def _json(text: str) -> Any:
    """The JSON value of ``text``, or None if it is not JSON (NaN and Infinity are not)."""
    try:
        return json.loads(text, parse_constant=_refuse)
    except ValueError:  # JSONDecodeError included
        return None


def _refuse(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")
