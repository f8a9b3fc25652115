"""What a chat request lets the model write, as the engine's ``OutputConstraint``.

Frameworks send ``tool_choice``, ``parallel_tool_calls`` and ``response_format`` by
default; the server keeps them by constrained decoding (vLLM's structured outputs):

- ``tool_choice: "required"``: one or more tool calls and nothing else; a named function:
  exactly one call of it; either way the calls' arguments follow their tools' schemas;
- ``parallel_tool_calls: false``: at most one call (with ``auto``: text, then at most one);
- a tool declared ``strict: true``: its calls' arguments follow its schema;
- ``response_format`` ``json_object``: a JSON object; ``json_schema``: JSON following the
  schema.

Tool calls are constrained in the served family's own format, by vLLM's structural tag
for the server's ``tool_parser`` (``hermes``, the default: the ``<tool_call>{"name": ...,
"arguments": ...}</tool_call>`` blocks the served templates teach), so a forced call is
written as the model writes any call: its sampled tokens are recorded as sampled and parsed
like any other answer. A family vLLM has no structural tag for gets a 422 that says so.
JSON inside a call allows one whitespace character at a time (the engine's
no-free-whitespace setting does not reach structural tags).

vLLM is imported on first use, in a worker thread (``constraint_of``): a request that
asks for none of this never waits for it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Literal

from rollgym.contract.openai import ChatCompletionRequest, NamedToolChoice
from rollgym.engine.base import OutputConstraint
from rollgym.server.errors import BadRequest

TOOL_CALL_FORMAT = "hermes"  # vLLM's structural tag of the served templates' call format


async def constraint_of(
    body: ChatCompletionRequest, tool_format: str = TOOL_CALL_FORMAT
) -> OutputConstraint | None:
    """The constraint ``body`` asks for (see the module docstring), None if it asks for none."""
    if not _asks(body):
        return None
    return await asyncio.to_thread(output_constraint, body, tool_format)


def output_constraint(
    body: ChatCompletionRequest, tool_format: str = TOOL_CALL_FORMAT
) -> OutputConstraint | None:
    """``constraint_of``'s work (CPU: a thread's)."""
    if body.parses_tools and (tag := _tool_calls_tag(body, tool_format)) is not None:
        return OutputConstraint("structural_tag", tag)
    answer_format = body.response_format
    if answer_format is None or answer_format.type == "text":
        return None
    if answer_format.type == "json_object":
        return OutputConstraint("json_object")
    return OutputConstraint("json", json.dumps(answer_format.json_schema.json_schema))


def _asks(body: ChatCompletionRequest) -> bool:
    strict_tool = any(tool.function.strict for tool in body.tools or ())
    forced = body.tool_choice not in (None, "auto", "none")
    tools_constrained = body.parses_tools and (
        forced or strict_tool or body.parallel_tool_calls is False
    )
    json_answer = body.response_format is not None and body.response_format.type != "text"
    return tools_constrained or json_answer


def _tool_calls_tag(body: ChatCompletionRequest, tool_format: str) -> str | None:
    """vLLM's structural tag for the calls ``body`` allows, as JSON; None: calls are free."""
    from vllm.entrypoints.openai.chat_completion.protocol import (
        ChatCompletionNamedToolChoiceParam,
        ChatCompletionToolsParam,
    )
    from vllm.tool_parsers.structural_tag_registry import (
        get_model_structural_tag,
        limit_to_single_tool_call,
    )
    from vllm.tool_parsers.tool_strict_level import ToolStrictLevel

    tools = [
        ChatCompletionToolsParam.model_validate(tool.model_dump(exclude_none=True))
        for tool in body.tools or ()
    ]
    choice: ChatCompletionNamedToolChoiceParam | Literal["auto", "none", "required"] = (
        ChatCompletionNamedToolChoiceParam.model_validate(body.tool_choice.model_dump())
        if isinstance(body.tool_choice, NamedToolChoice)
        else body.tool_choice or "auto"
    )
    single = body.parallel_tool_calls is False
    # A forced call's arguments follow its schema, strict or not (PARAMETER): the client
    # asked for that call, and in a session the model is shown the env's tools only, so a
    # client's own tool (LangChain's function_calling schema) is known by its schema alone.
    # FUNCTION: the envelope is constrained even with auto (one call at most needs a grammar)
    if choice not in ("auto", "none"):
        level = ToolStrictLevel.PARAMETER
    else:
        level = ToolStrictLevel.FUNCTION if single else ToolStrictLevel.AUTO
    try:
        tag = get_model_structural_tag(
            tool_format, tools, choice, reasoning=False, strict_level=level
        )
    except ValueError as exc:  # vLLM's checks of the tools (VLLMValidationError included)
        raise BadRequest(f"the tools cannot be constrained: {exc}") from exc
    if tag is None:
        return None
    if single:
        limit_to_single_tool_call(tag)
    return json.dumps(_spare_whitespace(tag.model_dump(mode="json")))


def _spare_whitespace(node: object) -> object:
    """``node`` with each JSON format of the tag allowing one whitespace character at a
    time: the engine's no-free-whitespace setting does not reach structural tags, and a
    small model's run of blank lines inside a forced call's arguments eats its tokens."""
    if isinstance(node, list):
        return [_spare_whitespace(item) for item in node]
    if not isinstance(node, dict):
        return node
    spared = {key: _spare_whitespace(value) for key, value in node.items()}
    if spared.get("type") == "json_schema" and "json_schema" in spared:
        spared["max_whitespace_cnt"] = 1
    return spared
