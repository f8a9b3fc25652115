"""Strict parsing of the agent's message: fenced code blocks and ``<tool_call>`` tags.

Both parsers either return exactly what the agent meant or raise ``ActionError`` whose text
tells the agent what to fix; envs send that text back as feedback. Nothing is guessed: an
unclosed fence or tag, two blocks where one is expected, a language that does not fit, bad
JSON or an unknown tool are all errors. What the agent writes is read under bounds
(``envs.untrusted``): a tool call nested deeper than ``MAX_DEPTH``, or whose arguments hold
a NUL or a lone surrogate, is an ``ActionError`` too, never an exception of the host's.

Tool calls use the default model's chat template format (Qwen2/Hermes style)::

    <tool_call>{"name": "python", "arguments": {"code": "print(1 + 1)"}}</tool_call>

>>> extract_code("Here:\\n```python\\nprint(1)\\n```", languages=("python",))
'print(1)'
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from rollgym.envs.errors import ActionError
from rollgym.envs.tools import Tool, ToolCall
from rollgym.envs.untrusted import MAX_DEPTH, json_depth, text_problem

_FENCE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+.-]*)[ \t]*$")
_CLOSE = re.compile(r"^[ \t]*```[ \t]*$")
_TOOL_OPEN = "<tool_call>"
_TOOL_CLOSE = "</tool_call>"
_TOOL_CALL = re.compile(re.escape(_TOOL_OPEN) + r"(.*?)" + re.escape(_TOOL_CLOSE), re.DOTALL)


def code_blocks(text: str) -> list[tuple[str, str]]:
    """All fenced blocks in ``text`` as ``(language, code)``; raise on an unclosed fence."""
    blocks: list[tuple[str, str]] = []
    language: str | None = None
    body: list[str] = []
    for line in text.splitlines():
        if language is None:
            opened = _FENCE.match(line)
            if opened:
                language, body = opened.group(1).lower(), []
        elif _CLOSE.match(line):
            blocks.append((language, "\n".join(body)))
            language = None
        else:
            body.append(line)
    if language is not None:
        raise ActionError("A code block was opened with ``` but never closed.")
    return blocks


def extract_code(text: str, *, languages: Sequence[str]) -> str:
    """The code of the one fenced block in ``text``.

    ``languages`` lists the accepted info strings (e.g. ``("python", "py")``); a block with
    no language is accepted too. Exactly one block must be present.
    """
    blocks = code_blocks(text)
    shown = languages[0] if languages else ""
    if not blocks:
        raise ActionError(f"No code block found. Put your code in one ```{shown} ... ``` block.")
    if len(blocks) > 1:
        raise ActionError(f"Found {len(blocks)} code blocks; send exactly one ```{shown} block.")
    language, code = blocks[0]
    if language and language not in languages:
        raise ActionError(f"Expected a ```{shown} block, got a ```{language} block.")
    if "\x00" in code:
        raise ActionError("The code block contains NUL characters; send plain text code.")
    if not code.strip():
        raise ActionError("The code block is empty.")
    return code


def has_tool_call(text: str) -> bool:
    """Whether ``text`` tries to call a tool (an opening or closing tag is present)."""
    return _TOOL_OPEN in text or _TOOL_CLOSE in text


def parse_tool_calls(text: str, tools: Sequence[Tool], *, max_calls: int = 8) -> list[ToolCall]:
    """Every ``<tool_call>`` in ``text``, checked against ``tools``; [] when there is none."""
    opened, closed = text.count(_TOOL_OPEN), text.count(_TOOL_CLOSE)
    if opened != closed:
        raise ActionError(
            f"Unbalanced tool-call tags: {opened} <tool_call> and {closed} </tool_call>."
        )
    bodies = _TOOL_CALL.findall(text)
    if len(bodies) > max_calls:
        raise ActionError(f"Too many tool calls ({len(bodies)}); at most {max_calls} per turn.")
    by_name = {tool.name: tool for tool in tools}
    for index, body in enumerate(bodies, start=1):
        if (depth := json_depth(body)) > MAX_DEPTH:
            raise ActionError(
                f"Tool call {index}: the JSON is nested {depth} deep; at most {MAX_DEPTH} levels."
            )
    return [_parse_one(body, index, by_name) for index, body in enumerate(bodies, start=1)]


def _parse_one(body: str, index: int, tools: dict[str, Tool]) -> ToolCall:
    if _TOOL_OPEN in body:
        raise ActionError(f"Tool call {index}: tool-call tags cannot be nested.")
    try:
        payload = json.loads(body, parse_constant=_reject_constant)
    except (json.JSONDecodeError, ValueError) as exc:
        raise ActionError(f"Tool call {index}: invalid JSON ({_json_problem(exc)}).") from exc
    if not isinstance(payload, dict) or set(payload) != {"name", "arguments"}:
        raise ActionError(
            f'Tool call {index}: expected {{"name": ..., "arguments": {{...}}}} '
            "with exactly those two keys."
        )
    name, arguments = payload["name"], payload["arguments"]
    if not isinstance(name, str) or name not in tools:
        known = ", ".join(sorted(tools)) or "none"
        raise ActionError(f"Tool call {index}: unknown tool {name!r}. Available tools: {known}.")
    if not isinstance(arguments, dict):
        raise ActionError(f"Tool call {index}: 'arguments' must be a JSON object.")
    if problem := text_problem(arguments):
        raise ActionError(f"Tool call {index}: {problem}; send plain text arguments.")
    tools[name].validate(arguments)
    return ToolCall(name=name, arguments=arguments)


def _reject_constant(constant: str) -> Any:
    raise ValueError(f"{constant} is not valid JSON")


def _json_problem(exc: Exception) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    return str(exc)
