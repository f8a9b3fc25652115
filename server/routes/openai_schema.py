"""The OpenAI-compatible bodies the server takes and gives (the subset it implements).

Inputs are strict: a parameter the server does not implement (``n > 1``, streaming,
``top_logprobs > 0``, ``stop`` strings...) is a 422 that names it, never silently ignored.
rollgym's additions ride in the same bodies, as the official client's ``extra_body``:
``session_id`` (record the call as that session's turn) and ``return_token_ids`` (the
prompt's and the completion's token ids). Every answer carries ``policy_version``.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ChatMessageIn(BaseModel):
    """A message as OpenAI clients send it; extra keys (``name``, ``tool_calls``) pass."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | None = None


class _Generation(_Strict):
    model: str
    max_tokens: int | None = Field(None, gt=0)
    temperature: float | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)
    n: Literal[1] = 1
    stream: Literal[False] = False
    user: str | None = None
    return_token_ids: bool = False


class ChatCompletionRequest(_Generation):
    messages: list[ChatMessageIn] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, gt=0)
    logprobs: bool = False
    top_logprobs: Literal[0] | None = None
    tools: list[dict[str, Any]] | None = None
    session_id: str | None = None

    @model_validator(mode="after")
    def _one_limit(self) -> ChatCompletionRequest:
        if self.max_tokens is not None and self.max_completion_tokens is not None:
            raise ValueError("give max_tokens or max_completion_tokens, not both")
        return self

    @property
    def token_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_Generation):
    prompt: str | list[int] = Field(min_length=1)
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
    content: str


class ChatChoice(BaseModel):
    index: int = 0
    message: ChatMessageOut
    finish_reason: str
    logprobs: ChatLogprobs | None = None
    token_ids: list[int] | None = None


class _Answer(BaseModel):
    id: str = Field(default_factory=lambda: f"rollgym-{uuid.uuid4().hex}")
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    usage: Usage
    policy_version: int
    prompt_token_ids: list[int] | None = None


class ChatCompletion(_Answer):
    object: Literal["chat.completion"] = "chat.completion"
    choices: list[ChatChoice]
    session_id: str | None = None


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
