"""The OpenAI Responses API's bodies (``POST /v1/responses``), the subset the server implements.

The request is strict, as chat's: a parameter or an input item the server does not
implement (``reasoning``, ``include`` entries, built-in tools, ``reasoning`` or image
items...) is a 422 that names it. What is implemented: ``input`` as a text or as items
(``message`` with or without ``type``, ``function_call`` and ``function_call_output``),
``instructions`` (a system message before the input), function ``tools`` with
``tool_choice`` and ``parallel_tool_calls``, ``text.format`` (``json_object``,
``json_schema``), ``previous_response_id`` (within the session of that response),
``max_output_tokens``, ``temperature``, ``top_p`` and ``stream``. rollgym's additions, as
on chat: ``session_id`` (or the ``X-Rollgym-Session`` header).

The answer is the openai package's own ``Response`` (the field's model of the wire format),
with ``policy_version`` and ``session_id`` added; its ``metadata`` carries the version
too (``policy_version``), for clients that keep only the fields they know.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from openai.types.responses import Response
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from rollgym.contract.openai import (
    JsonObjectFormat,
    JsonSchemaSpec,
    Name,
    TextFormat,
)
from rollgym.contract.wire import MAX_TOKENS, Text

CallId = Annotated[str, Field(min_length=1, max_length=256)]
ItemStatus = Literal["in_progress", "completed", "incomplete"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ContentText(_Strict):
    """A text part of a message: ``input_text`` (the client's) or ``output_text`` (a model
    answer sent back as it came)."""

    type: Literal["input_text", "output_text"]
    text: Text
    annotations: list[dict[str, Any]] | None = None
    logprobs: list[dict[str, Any]] | None = None


class MessageItem(_Strict):
    """A message; ``type`` may be left out (the SDKs' "easy" input message)."""

    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: Text | list[ContentText]
    id: str | None = None
    status: ItemStatus | None = None
    phase: Literal["commentary", "final_answer"] | None = None

    @property
    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class FunctionCallItem(_Strict):
    """A tool call of an earlier answer, sent back as it came."""

    type: Literal["function_call"]
    call_id: CallId
    name: Name
    arguments: Text
    id: str | None = None
    status: ItemStatus | None = None


class FunctionCallOutputItem(_Strict):
    """What a tool call returned (``call_id`` names the call)."""

    type: Literal["function_call_output"]
    call_id: CallId
    output: Text
    id: str | None = None
    status: ItemStatus | None = None


def _item_kind(item: Any) -> str:
    kind = item.get("type", "message") if isinstance(item, dict) else getattr(item, "type", None)
    return kind if isinstance(kind, str) else "message"


InputItem = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")],
    Discriminator(_item_kind),
]


class FunctionTool(_Strict):
    """A function the model may call, in the Responses format (flat, not under
    ``function``)."""

    type: Literal["function"]
    name: Name
    description: Text | None = None
    parameters: dict[str, Any] | None = Field(None, description="a JSON schema")
    strict: bool | None = None


class NamedFunction(_Strict):
    type: Literal["function"]
    name: Name


class JsonSchemaTextFormat(JsonSchemaSpec):
    """``text.format`` for a JSON schema: chat's ``json_schema`` spec, flat."""

    type: Literal["json_schema"]


class TextConfig(_Strict):
    format: Annotated[
        TextFormat | JsonObjectFormat | JsonSchemaTextFormat, Field(discriminator="type")
    ] = TextFormat(type="text")


class ResponsesRequest(_Strict):
    model: Name
    input: Text | list[InputItem] = Field(max_length=4096)
    instructions: Text | None = None
    tools: list[FunctionTool] | None = Field(None, max_length=128)
    tool_choice: Literal["auto", "none", "required"] | NamedFunction | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    previous_response_id: Annotated[str, Field(max_length=128)] | None = None
    max_output_tokens: int | None = Field(None, gt=0, le=MAX_TOKENS)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    stream: bool = False
    store: bool | None = Field(None, description="false: not kept for previous_response_id")
    include: list[str] | None = Field(None, max_length=0, description="nothing to include")
    metadata: dict[str, Annotated[str, Field(max_length=512)]] | None = Field(None, max_length=16)
    truncation: Literal["disabled"] | None = None
    user: Annotated[str, Field(max_length=256)] | None = None
    session_id: Annotated[str, Field(max_length=128)] | None = None

    @property
    def items(self) -> list[MessageItem | FunctionCallItem | FunctionCallOutputItem]:
        """``input`` as items (a text is one user message)."""
        if isinstance(self.input, str):
            return [MessageItem(role="user", content=self.input)]
        return list(self.input)


class ResponseObject(Response):
    """The openai package's ``Response``, with rollgym's additions."""

    policy_version: int = Field(description="the version that sampled the answer")
    session_id: str | None = None
