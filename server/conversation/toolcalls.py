"""Tool calls out of a completion's text, read by vLLM's parser of the served model's family.

Each model family writes its calls its own way (Hermes/Qwen2.5: a tagged JSON object, Llama
3: a bare JSON object with ``parameters``, Qwen3-Coder and GLM: XML-ish tags, Gemma 4, ...);
vLLM ships a parser per family (``vllm.tool_parsers``, named as ``--tool-call-parser``
names them). ``ToolCallParser`` wraps one of them, chosen by the server's ``tool_parser``
setting (``hermes``: the format the default model's template teaches, and the one ``ChatCodec``
lists in the system message for templates that ignore tools)::

    Let me compute it.
    <tool_call>{"name": "calculator", "arguments": {"expression": "2 + 3"}}</tool_call>

``parse_tool_calls`` is all or nothing: when vLLM's parser finds calls and every one names
a declared tool with ``arguments`` a JSON object (or a JSON text of one, as a template that
renders OpenAI's ``arguments`` strings shows them), its content and calls are the answer;
otherwise the whole text is content and there are no calls, so the client sees what the
model wrote. Parsing only shapes the answer: the sampled token ids are recorded as they are.

vLLM's parsers take the tokenizer for streaming (the token ids of their markers); reading a
whole text with a family that needs no vocabulary works without one (``tokenizer=None``),
a family that needs one refuses with ``ToolParserError``.

>>> parse_tool_calls('Hi <tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>', {"f"})
ParsedReply(content='Hi', calls=[ParsedCall(name='f', arguments='{"x": 1}')])
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
from collections.abc import Collection, Sequence
from typing import Any

DEFAULT_PARSER = "hermes"
_OBJECT = {"type": "object"}


class ToolParserError(ValueError):
    """A tool parser that vLLM does not have, or that cannot work with the tokenizer."""


@dataclasses.dataclass(frozen=True)
class ParsedCall:
    name: str
    arguments: str  # a JSON object's text, as OpenAI sends it


@dataclasses.dataclass(frozen=True)
class ParsedReply:
    content: str | None  # None when the model wrote nothing but calls
    calls: list[ParsedCall]


class _NoVocabulary:
    """The tokenizer a whole-text parse needs: vLLM's parsers only look up marker ids in it."""

    def get_vocab(self) -> dict[str, int]:
        return {}


class ToolCallParser:
    """vLLM's tool parser ``family`` (a ``vllm.tool_parsers`` name) over ``tokenizer``.

    >>> ToolCallParser("hermes").family
    'hermes'
    """

    def __init__(self, family: str = DEFAULT_PARSER, tokenizer: Any = None):
        from vllm.tool_parsers import ToolParserManager

        known = ToolParserManager.list_registered()
        if family not in known:
            raise ToolParserError(
                f"vLLM has no tool parser {family!r}: set tool_parser to one of {', '.join(known)}"
            )
        # vLLM's parsers log a traceback for each answer that is no well-formed call; here
        # that is an ordinary answer (shown as text), not an error of the server's.
        logging.getLogger("vllm.tool_parsers").setLevel(logging.CRITICAL)
        self.family = family
        self._parser_class = ToolParserManager.get_tool_parser(family)
        self._tokenizer = tokenizer if tokenizer is not None else _NoVocabulary()
        self._new_parser()  # a tokenizer without the family's markers fails now, not per call

    def _new_parser(self) -> Any:
        """A fresh vLLM parser (they keep per-answer streaming state)."""
        try:
            return self._parser_class(self._tokenizer)
        except Exception as exc:  # each family checks its own markers in its own way
            raise ToolParserError(
                f"vLLM's {self.family!r} tool parser cannot read this model's answers: {exc}; "
                "set tool_parser to the model family's parser"
            ) from None

    def parse(self, text: str, tools: Sequence[dict[str, Any]]) -> ParsedReply:
        """``text`` as content and calls of ``tools`` (OpenAI tool dicts), all or nothing."""
        as_text = ParsedReply(content=text, calls=[])
        names = {tool["function"]["name"] for tool in tools}
        extracted = self._new_parser().extract_tool_calls(text, _vllm_request(tools))
        if not extracted.tools_called or not extracted.tool_calls:
            return as_text
        calls = [_call(c.function.name, c.function.arguments, names) for c in extracted.tool_calls]
        if any(call is None for call in calls):
            return as_text
        content = (extracted.content or "").strip()
        return ParsedReply(content=content or None, calls=[c for c in calls if c is not None])


def parse_tool_calls(
    text: str, tool_names: Collection[str], *, parser: ToolCallParser | None = None
) -> ParsedReply:
    """``text`` as content and calls of the tools named ``tool_names``, read by ``parser``
    (default: the Hermes family's) (see above)."""
    tools = [
        {"type": "function", "function": {"name": n, "parameters": _OBJECT}} for n in tool_names
    ]
    return (parser or _hermes()).parse(text, tools)


@functools.cache
def _hermes() -> ToolCallParser:
    return ToolCallParser(DEFAULT_PARSER)


def _vllm_request(tools: Sequence[dict[str, Any]]) -> Any:
    """The request vLLM's parsers read the declared tools from (parameter types, names)."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    return ChatCompletionRequest(model="served", messages=[], tools=list(tools))


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
