"""A chat completion as server-sent events, in OpenAI's chunk format (``stream: true``).

The answer is generated whole first (so a bad request still gets its 4xx, never a broken
stream) and then sent as chunks, per choice::

    data: {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}], ...}
    data: {"choices": [{"index": 0, "delta": {"content": "Let me compute it."}}], ...}
    data: {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": ...}]}}], ...}
    data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}], ...}
    data: [DONE]

Every chunk carries the policy version in ``system_fingerprint``; each choice's last
chunk carries its ``token_ids`` when they were asked for. The stream's
last chunk carries ``usage``, ``policy_version`` and, when asked, ``prompt_token_ids``:
with ``stream_options.include_usage`` that is an extra chunk with no choices (as OpenAI
sends it), otherwise the last choice's closing chunk (so a client that reads
``choices[0]`` of every chunk never meets an empty list).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from rollgym.contract.openai import (
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChunkChoice,
    ChunkDelta,
    ChunkToolCall,
)

DONE = "data: [DONE]\n\n"


def chat_chunks(answer: ChatCompletion, *, include_usage: bool) -> list[ChatCompletionChunk]:
    """``answer`` as the chunks a stream of it sends, in order (see the module docstring)."""

    def chunk(choices: list[ChunkChoice]) -> ChatCompletionChunk:
        return ChatCompletionChunk(
            id=answer.id,
            created=answer.created,
            model=answer.model,
            choices=choices,
            system_fingerprint=answer.system_fingerprint,
        )

    chunks = [chunk([c]) for choice in answer.choices for c in _choice_chunks(choice)]
    if include_usage:
        chunks.append(chunk([]))
    last = chunks[-1]
    last.usage = answer.usage
    last.policy_version = answer.policy_version
    last.prompt_token_ids = answer.prompt_token_ids
    last.session_id = answer.session_id
    return chunks


def _choice_chunks(choice: ChatChoice) -> Iterator[ChunkChoice]:
    index, message, logprobs = choice.index, choice.message, choice.logprobs
    yield ChunkChoice(index=index, delta=ChunkDelta(role="assistant", content=""))
    if message.content:
        delta = ChunkDelta(content=message.content)
        yield ChunkChoice(index=index, delta=delta, logprobs=logprobs)
        logprobs = None  # sent with the text; with no text, they close the choice
    if message.tool_calls:
        calls = [
            ChunkToolCall(index=i, **call.model_dump()) for i, call in enumerate(message.tool_calls)
        ]
        yield ChunkChoice(index=index, delta=ChunkDelta(tool_calls=calls))
    yield ChunkChoice(
        index=index,
        delta=ChunkDelta(),
        finish_reason=choice.finish_reason,
        logprobs=logprobs,
        token_ids=choice.token_ids,
    )


def sse(chunks: Iterable[ChatCompletionChunk]) -> Iterator[str]:
    """Each chunk as a ``data:`` event (unset fields left out), then ``data: [DONE]``."""
    for chunk in chunks:
        yield f"data: {chunk.model_dump_json(exclude_none=True)}\n\n"
    yield DONE
