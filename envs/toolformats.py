"""A model family's tool-call format, read by vLLM's parser of that family.

Each family writes its calls its own way (Hermes/Qwen2.5: a tagged JSON object, Llama 3: a
bare JSON object with ``parameters``, Qwen3-Coder and GLM: XML-ish tags, Gemma 4, ...);
vLLM ships a parser per family (``vllm.tool_parsers``, named as ``--tool-call-parser``
names them). ``ToolCallParser`` wraps one of them; the envs read answers in the Hermes
format (``DEFAULT_PARSER``: the one the default model's template and ``ChatCodec``'s tool
list teach), the server in the served model's (its ``tool_parser`` setting).

vLLM's parsers take the tokenizer for streaming (the token ids of their markers); reading a
whole text with a family that needs no vocabulary works without one (``tokenizer=None``); a
family that needs one refuses with ``ToolParserError``.

>>> ToolCallParser().read('Hi <tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>', [])
ReadCalls(content='Hi ', calls=[('f', '{"x": 1}')])
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Sequence
from typing import Any

DEFAULT_PARSER = "hermes"


class ToolParserError(ValueError):
    """A tool parser that vLLM does not have, or that cannot work with the tokenizer."""


@dataclasses.dataclass(frozen=True)
class ReadCalls:
    """What vLLM's parser read: the text outside the calls, and each call's name and
    arguments (the JSON text it found, unchecked)."""

    content: str | None
    calls: list[tuple[str, str]]


class _NoVocabulary:
    """The tokenizer a whole-text read needs: vLLM's parsers only look up marker ids in it."""

    def get_vocab(self) -> dict[str, int]:
        return {}


class ToolCallParser:
    """vLLM's tool parser ``family`` (a ``vllm.tool_parsers`` name) over ``tokenizer``."""

    def __init__(self, family: str = DEFAULT_PARSER, tokenizer: Any = None):
        from vllm.tool_parsers import ToolParserManager

        known = ToolParserManager.list_registered()
        if family not in known:
            raise ToolParserError(
                f"vLLM has no tool parser {family!r}: set tool_parser to one of {', '.join(known)}"
            )
        # vLLM's parsers log a traceback for each answer that is no well-formed call; here
        # that is an ordinary answer (text, or feedback to the agent), not an error.
        logging.getLogger("vllm.tool_parsers").setLevel(logging.CRITICAL)
        self.family = family
        self._parser_class = ToolParserManager.get_tool_parser(family)
        self._tokenizer: Any = tokenizer if tokenizer is not None else _NoVocabulary()
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

    def read(self, text: str, tools: Sequence[dict[str, Any]]) -> ReadCalls:
        """The calls in ``text`` (none if the parser found none or could not read them);
        ``tools`` (OpenAI tool dicts) type the parameters of families that need it."""
        extracted = self._new_parser().extract_tool_calls(text, _vllm_request(tools))
        if not extracted.tools_called:
            return ReadCalls(content=text, calls=[])
        calls = [(c.function.name, c.function.arguments) for c in extracted.tool_calls]
        return ReadCalls(content=extracted.content, calls=calls)


@functools.cache
def hermes() -> ToolCallParser:
    """The Hermes family's parser, made once (importing vLLM's parsers takes seconds)."""
    return ToolCallParser(DEFAULT_PARSER)


def _vllm_request(tools: Sequence[dict[str, Any]]) -> Any:
    """The request vLLM's parsers read the declared tools from (parameter types, names)."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    return ChatCompletionRequest(model="served", messages=[], tools=list(tools) or None)
