"""Strict parsing of the agent's message: fenced code blocks and ``<tool_call>`` tags.

Tool calls are read by vLLM's parser of the Hermes family (``envs.toolformats``), the format
the envs' tools are taught in; what is checked here is what the agent is told to fix.

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
from rollgym.envs.toolformats import hermes
from rollgym.envs.tools import Tool, ToolCall
from rollgym.envs.untrusted import MAX_DEPTH, json_depth, text_problem

_FENCE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+.-]*)[ \t]*$")
_CLOSE = re.compile(r"^[ \t]*```[ \t]*$")
_TOOL_OPEN = "<tool_call>"
_TOOL_CLOSE = "</tool_call>"


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
    """Every ``<tool_call>`` in ``text``, read by vLLM's Hermes parser and checked against
    ``tools``; [] when there is none."""
    opened, closed = text.count(_TOOL_OPEN), text.count(_TOOL_CLOSE)
    if opened != closed:
        raise ActionError(
            f"Unbalanced tool-call tags: {opened} <tool_call> and {closed} </tool_call>."
        )
    if opened > max_calls:
        raise ActionError(f"Too many tool calls ({opened}); at most {max_calls} per turn.")
    if not opened:
        return []
    if (depth := json_depth(text)) > MAX_DEPTH:
        raise ActionError(
            f"The tool call's JSON is nested {depth} deep; at most {MAX_DEPTH} levels."
        )
    read = hermes().read(text, [tool.to_openai() for tool in tools])
    if len(read.calls) != opened:
        raise ActionError(
            "A tool call could not be read: write each one as "
            '<tool_call>{"name": ..., "arguments": {...}}</tool_call> in valid JSON, '
            "one call per pair of tags."
        )
    by_name = {tool.name: tool for tool in tools}
    return [
        _checked(name, arguments, index, by_name)
        for index, (name, arguments) in enumerate(read.calls, start=1)
    ]


def _checked(name: Any, arguments_text: str, index: int, tools: dict[str, Tool]) -> ToolCall:
    """The call, if it names one of ``tools`` with arguments that fit its schema."""
    if not isinstance(name, str) or name not in tools:
        known = ", ".join(sorted(tools)) or "none"
        raise ActionError(f"Tool call {index}: unknown tool {name!r}. Available tools: {known}.")
    try:
        arguments = json.loads(arguments_text, parse_constant=_reject_constant)
    except ValueError as exc:  # NaN and Infinity, which vLLM's parser lets through
        raise ActionError(f"Tool call {index}: invalid JSON ({exc}).") from exc
    if not isinstance(arguments, dict):
        raise ActionError(f"Tool call {index}: 'arguments' must be a JSON object.")
    if problem := text_problem(arguments):
        raise ActionError(f"Tool call {index}: {problem}; send plain text arguments.")
    tools[name].validate(arguments)
    return ToolCall(name=name, arguments=arguments)


def _reject_constant(constant: str) -> Any:
    raise ValueError(f"{constant} is not valid JSON")
