"""The OpenAI chat fine-tuning format, to and from rollgym's conversations.

A contract: ``rollgym export`` and ``rollgym generate`` write it (``rollgym.data``) and
the SFT warm start reads its demonstrations in it, wherever that lives.

A rollgym conversation is plain ``role``/``content`` text (``Trajectory.messages``); a
model calls tools by writing ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
in its message, and each call gets one ``tool`` message back, in order. OpenAI's format
(one JSON object per line, ``{"messages": [...], "tools": [...]}``) carries tool calls as
structure instead::

    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1_0",
     "type": "function", "function": {"name": "python", "arguments": "{\\"code\\": ...}"}}]}
    {"role": "tool", "tool_call_id": "call_1_0", "content": "2\\n"}

An assistant message may carry OpenAI's ``weight`` (0: context only, not trained on; 1 or
absent: trained on), which both conversions keep.

``chat_record`` converts one way (a tool message with no call left to answer, e.g. the
env's complaint about a malformed call, becomes a ``user`` message, as OpenAI allows a
tool message only after a call); ``template_messages`` converts back to what a model
writes and a chat template renders (the calls after the message's text), which is how
the SFT warm start reads its demonstrations.

    >>> record = chat_record([
    ...     {"role": "user", "content": "1+1?"},
    ...     {"role": "assistant", "content": '<tool_call>{"name": "python", '
    ...      '"arguments": {"code": "print(1+1)"}}</tool_call>'},
    ...     {"role": "tool", "content": "2"},
    ... ])
    >>> record.messages[1].tool_calls[0].function.name
    'python'
    >>> template_messages(record)[1]["content"]
    '<tool_call>{"name": "python", "arguments": {"code": "print(1+1)"}}</tool_call>'
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


class FunctionCall(BaseModel):
    name: str
    arguments: str = Field(description="the arguments as a JSON string (OpenAI's convention)")


class ToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatTurn(BaseModel):
    """One message of the OpenAI format."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    weight: Literal[0, 1] | None = Field(
        None, description="an assistant message's training weight (0: context only)"
    )


class ChatRecord(BaseModel):
    """One line of an OpenAI chat fine-tuning file."""

    model_config = ConfigDict(extra="forbid")

    messages: list[ChatTurn] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None

    def to_json(self) -> str:
        return self.model_dump_json(exclude_none=True)


def _parse_calls(text: str, turn: int) -> tuple[str, list[ToolCall]]:
    """The text outside well-formed tool-call tags, and the calls (malformed ones stay text)."""
    calls: list[ToolCall] = []

    def take(match: re.Match[str]) -> str:
        try:
            body = json.loads(match.group(1))
        except ValueError:
            return match.group(0)
        if not isinstance(body, dict) or not isinstance(body.get("name"), str):
            return match.group(0)
        arguments = json.dumps(body.get("arguments", {}), ensure_ascii=False)
        call_id = f"call_{turn}_{len(calls)}"
        calls.append(
            ToolCall(id=call_id, function=FunctionCall(name=body["name"], arguments=arguments))
        )
        return ""

    rest = _CALL.sub(take, text)
    return rest, calls


def chat_record(
    messages: Iterable[Mapping[str, Any]], tools: Sequence[dict[str, Any]] | None = None
) -> ChatRecord:
    """A conversation of role/content messages in the OpenAI format (see the docstring)."""
    turns: list[ChatTurn] = []
    pending: list[str] = []  # ids of calls still waiting for their tool message
    for index, message in enumerate(messages):
        role, content = str(message["role"]), str(message.get("content") or "")
        if role == "assistant":
            text, calls = _parse_calls(content, index)
            pending = [call.id for call in calls]
            turns.append(
                ChatTurn(
                    role="assistant",
                    content=text if text or not calls else None,
                    tool_calls=calls or None,
                    weight=message.get("weight"),
                )
            )
        elif role == "tool" and pending:
            turns.append(ChatTurn(role="tool", content=content, tool_call_id=pending.pop(0)))
        elif role in ("system", "user"):
            turns.append(ChatTurn(role=role, content=content))
        else:  # a tool message no call is waiting for: the env speaking, as a user turn
            turns.append(ChatTurn(role="user", content=content))
    return ChatRecord(messages=turns, tools=list(tools) if tools else None)


def template_messages(record: ChatRecord) -> list[dict[str, Any]]:
    """Back to role/content text: each call as ``<tool_call>`` after the message's text
    (and an assistant message's ``weight``, if it has one)."""
    out: list[dict[str, Any]] = []
    for turn in record.messages:
        text = turn.content or ""
        for call in turn.tool_calls or ():
            body = {"name": call.function.name, "arguments": json.loads(call.function.arguments)}
            text += f"<tool_call>{json.dumps(body, ensure_ascii=False)}</tool_call>"
        message: dict[str, Any] = {"role": turn.role, "content": text}
        if turn.weight is not None:
            message["weight"] = turn.weight
        out.append(message)
    return out


def write_jsonl(records: Iterable[ChatRecord], path: Path) -> int:
    """Write ``records`` one per line; returns how many."""
    count = 0
    with path.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(record.to_json() + "\n")
            count += 1
    return count


def read_jsonl(path: Path) -> list[ChatRecord]:
    """Every record of an OpenAI chat fine-tuning file (blank lines skipped)."""
    with path.open(encoding="utf-8") as handle:
        return [ChatRecord.model_validate_json(line) for line in handle if line.strip()]
