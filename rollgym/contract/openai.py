"""The OpenAI-compatible bodies the server takes and gives (the subset it implements).

Inputs are strict: a parameter the server does not implement (``top_logprobs > 0``,
``frequency_penalty``, streaming or ``n > 1`` on completions...) is a 422 that names it,
never silently ignored. What frameworks send by default is implemented: ``tool_choice``
``required`` or a named function, ``parallel_tool_calls`` and ``response_format``
(``json_object``, ``json_schema``) are kept by constrained decoding
(``server.conversation.constraints``).
rollgym's additions ride in the same bodies, as the official client's ``extra_body``:
``session_id`` (record the call as that session's turn) and ``return_token_ids`` (the
prompt's and the completion's token ids). Every answer carries ``policy_version``, and
chat answers carry it in OpenAI's own ``system_fingerprint`` too (``policy-v3``), for
clients that drop fields they do not know.
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from rollgym.contract.wire import MAX_TOKENS, KwargScalar, Text

Name = Annotated[str, StringConstraints(min_length=1, max_length=256)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class FunctionCall(_Strict):
    name: Name
    arguments: Text = Field(description="the arguments as a JSON text, as OpenAI sends them")


class ToolCall(_Strict):
    id: Annotated[str, StringConstraints(max_length=256)] | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessageIn(BaseModel):
    """A message as OpenAI clients send it. ``tool_calls`` must be well formed; other extra
    keys (``refusal``, vendor fields) pass to the chat template as JSON scalars."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    __pydantic_extra__: dict[str, KwargScalar] = Field(init=False)

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: Text | None = None
    name: Name | None = None
    tool_calls: list[ToolCall] | None = Field(None, max_length=128)
    tool_call_id: Annotated[str, StringConstraints(max_length=256)] | None = None


class FunctionSpec(_Strict):
    name: Name
    description: Text | None = None
    parameters: dict[str, Any] | None = Field(None, description="a JSON schema")
    strict: bool | None = None


class ToolSpec(_Strict):
    """A tool the model may call, in OpenAI's function format (rendered by the template)."""

    type: Literal["function"] = "function"
    function: FunctionSpec

    def rendered(self) -> dict[str, Any]:
        """What the chat template shows the model: the tool's name, description and
        parameters. ``strict`` asks the server for constrained decoding; it says nothing to
        the model, so it is left out: the OpenAI Agents SDK sends ``"strict": false`` with
        every tool, and its agents' prompts are then the ones the env's own tools make."""
        return self.model_dump(exclude_none=True, exclude={"function": {"strict"}})


class NamedFunction(_Strict):
    name: Name


class NamedToolChoice(_Strict):
    """``tool_choice`` naming the one function the answer must call."""

    type: Literal["function"] = "function"
    function: NamedFunction


ToolChoice = Literal["auto", "none", "required"] | NamedToolChoice


class JsonSchemaSpec(_Strict):
    """``response_format.json_schema``: the schema the answer's text must follow."""

    model_config = ConfigDict(populate_by_name=True)
    name: Name
    description: Text | None = None
    json_schema: dict[str, Any] = Field(alias="schema")
    strict: bool | None = None


class TextFormat(_Strict):
    type: Literal["text"]


class JsonObjectFormat(_Strict):
    type: Literal["json_object"]


class JsonSchemaFormat(_Strict):
    type: Literal["json_schema"]
    json_schema: JsonSchemaSpec


ResponseFormat = Annotated[
    TextFormat | JsonObjectFormat | JsonSchemaFormat, Field(discriminator="type")
]


def policy_fingerprint(version: int) -> str:
    """The policy version in OpenAI's ``system_fingerprint`` field.

    >>> policy_fingerprint(3)
    'policy-v3'
    """
    return f"policy-v{version}"


StopString = Annotated[str, StringConstraints(min_length=1, max_length=256)]
MAX_CHOICES = 16


class _Generation(_Strict):
    model: Name
    max_tokens: int | None = Field(None, gt=0, le=MAX_TOKENS)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    stop: StopString | list[StopString] | None = Field(
        None, description="up to 4 texts; the answer ends before the first one the model writes"
    )
    seed: int | None = Field(
        None, ge=0, lt=2**63, description="choice i samples with seed + i: reproducible"
    )
    user: Annotated[str, StringConstraints(max_length=256)] | None = None
    return_token_ids: bool = False

    @property
    def stop_strings(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or ())

    @model_validator(mode="after")
    def _few_stops(self) -> _Generation:
        if len(self.stop_strings) > 4:
            raise ValueError("stop takes at most 4 texts")
        return self


class StreamOptions(_Strict):
    include_usage: bool = False


class ChatCompletionRequest(_Generation):
    messages: list[ChatMessageIn] = Field(min_length=1, max_length=4096)
    max_completion_tokens: int | None = Field(None, gt=0, le=MAX_TOKENS)
    n: int = Field(1, ge=1, le=MAX_CHOICES)
    stream: bool = False
    stream_options: StreamOptions | None = None
    logprobs: bool = False
    top_logprobs: Literal[0] | None = None
    tools: list[ToolSpec] | None = Field(None, max_length=128)
    tool_choice: ToolChoice | None = Field(
        None,
        description="auto (the default): calls are parsed; none: the text is the answer; "
        "required or a named function: the answer is calls (constrained decoding)",
    )
    parallel_tool_calls: bool | None = Field(
        None, description="false: at most one call per answer (constrained decoding)"
    )
    response_format: ResponseFormat | None = None
    session_id: Annotated[str, StringConstraints(max_length=128)] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ChatCompletionRequest:
        if self.max_tokens is not None and self.max_completion_tokens is not None:
            raise ValueError("give max_tokens or max_completion_tokens, not both")
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options needs stream: true")
        check_tool_choice(self.tool_choice, self.tools, self.response_format)
        return self

    @property
    def parses_tools(self) -> bool:
        """Whether tool calls are parsed out of the answer."""
        return bool(self.tools) and self.tool_choice != "none"

    @property
    def token_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


def check_tool_choice(
    choice: ToolChoice | None,
    tools: list[ToolSpec] | None,
    response_format: ResponseFormat | None,
) -> None:
    """A ``tool_choice`` that asks for calls needs tools (the named one among them), and
    cannot be asked together with a JSON ``response_format`` (the answer is one or the other)."""
    if choice != "required" and not isinstance(choice, NamedToolChoice):
        return
    if not tools:
        raise ValueError("tool_choice asks for a tool call, but no tools were given")
    if isinstance(choice, NamedToolChoice):
        names = [tool.function.name for tool in tools]
        if choice.function.name not in names:
            raise ValueError(f"tool_choice names {choice.function.name!r}, not one of {names}")
    if response_format is not None and response_format.type != "text":
        raise ValueError("give tool_choice required/named or a JSON response_format, not both")


class CompletionRequest(_Generation):
    prompt: Text | list[Annotated[int, Field(ge=0)]] = Field(min_length=1)
    n: Literal[1] = 1
    stream: Literal[False] = False
    logprobs: Literal[0, 1] | None = Field(
        None, description="the sampled token's logprob (top alternatives are not offered)"
    )
    echo: Literal[False] = False


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: dict[str, int]


def usage(prompt: int, completion: int, cached: int) -> Usage:
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        prompt_tokens_details={"cached_tokens": cached},
    )


class TokenLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[dict[str, Any]] = Field(default_factory=list)


class ChatLogprobs(BaseModel):
    content: list[TokenLogprob]


class ChatMessageOut(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[ToolCall] | None = None


class ChatChoice(BaseModel):
    index: int = 0
    message: ChatMessageOut
    finish_reason: str
    logprobs: ChatLogprobs | None = None
    token_ids: list[int] | None = None
    policy_version: int = Field(description="the version that sampled this choice")


class _Answer(BaseModel):
    id: str = Field(default_factory=lambda: f"rollgym-{uuid.uuid4().hex}")
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    usage: Usage
    policy_version: int
    prompt_token_ids: list[int] | None = None


class ChatCompletion(_Answer):
    """``policy_version``: the lowest of the choices' (``n > 1`` may straddle an update);
    ``system_fingerprint`` says it too (``policy_fingerprint``)."""

    object: Literal["chat.completion"] = "chat.completion"
    choices: list[ChatChoice]
    session_id: str | None = None
    system_fingerprint: str | None = None


class ChunkToolCall(ToolCall):
    index: int


class ChunkDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[ChunkToolCall] | None = None


class ChunkChoice(BaseModel):
    index: int
    delta: ChunkDelta
    finish_reason: str | None = None
    logprobs: ChatLogprobs | None = None
    token_ids: list[int] | None = None


class ChatCompletionChunk(BaseModel):
    """One server-sent event of a streamed chat completion (see ``openai_stream``)."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None
    policy_version: int | None = None
    prompt_token_ids: list[int] | None = None
    session_id: str | None = None
    system_fingerprint: str | None = None


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: None = None
    text_offset: list[int]


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    finish_reason: str
    logprobs: CompletionLogprobs | None = None
    token_ids: list[int] | None = None


class Completion(_Answer):
    object: Literal["text_completion"] = "text_completion"
    choices: list[CompletionChoice]


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=lambda: int(time.time()))
    owned_by: str = "rollgym"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
