"""OpenAI-compatible routes on the same engine: models, chat completions, completions.

Every answer carries the policy version (body ``policy_version``, header
``X-Policy-Version``). A chat call with a session id (header ``X-Rollgym-Session`` or body
``session_id``) is recorded as that session's model turn; see ``server.sessions``.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Annotated

from fastapi import APIRouter, Header, Response

from rollgym.contract.wire import SamplingSettings
from rollgym.server.chat import ChatCodec, ChatInputError
from rollgym.server.errors import BadRequest
from rollgym.server.policy import Generation
from rollgym.server.routes.deps import Services, ServicesDep
from rollgym.server.routes.openai_schema import (
    ChatChoice,
    ChatCompletion,
    ChatCompletionRequest,
    ChatLogprobs,
    ChatMessageOut,
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    ModelCard,
    ModelList,
    TokenLogprob,
    usage,
)

router = APIRouter(prefix="/v1")
VERSION_HEADER = "X-Policy-Version"


@router.get("/models")
async def models(services: ServicesDep) -> ModelList:
    return ModelList(data=[ModelCard(id=services.settings.engine.model_name)])


@router.post("/chat/completions")
async def chat_completions(
    body: ChatCompletionRequest,
    response: Response,
    services: ServicesDep,
    x_rollgym_session: Annotated[str | None, Header()] = None,
) -> ChatCompletion:
    _check_model(body.model, services)
    sampling = _sampling(services, body.temperature, body.top_p, body.token_limit)
    messages = [m.model_dump(exclude_none=True) for m in body.messages]
    for message in messages:
        message.setdefault("content", "")
    tools = [t.model_dump(exclude_none=True) for t in body.tools] if body.tools else None
    codec = services.codec
    content_chars = sum(len(m["content"]) for m in messages)  # rendered as they are
    codec.check_chars(content_chars, services.settings.engine.max_model_len)
    session_id = body.session_id or x_rollgym_session
    if session_id is not None:
        generation = await services.sessions.generate(session_id, messages, sampling, tools=tools)
        prompt_ids = None
    else:
        prompt_ids = await asyncio.to_thread(codec.first_prompt, messages, tools=tools)
        generation = await services.policy.generate(
            prompt_ids, sampling, stop_token_ids=[codec.eos_id]
        )
    response.headers[VERSION_HEADER] = str(generation.policy_version)
    text, token_logprobs = await asyncio.to_thread(_decoded, codec, generation, body.logprobs)
    choice = ChatChoice(
        message=ChatMessageOut(content=text),
        finish_reason=generation.finish_reason,
        logprobs=ChatLogprobs(content=token_logprobs) if body.logprobs else None,
        token_ids=generation.token_ids if body.return_token_ids else None,
    )
    return ChatCompletion(
        model=body.model,
        choices=[choice],
        usage=usage(generation.prompt_tokens, len(generation.token_ids), generation.cached_tokens),
        policy_version=generation.policy_version,
        prompt_token_ids=prompt_ids if body.return_token_ids else None,
        session_id=session_id,
    )


@router.post("/completions")
async def completions(
    body: CompletionRequest, response: Response, services: ServicesDep
) -> Completion:
    _check_model(body.model, services)
    sampling = _sampling(services, body.temperature, body.top_p, body.max_tokens)
    codec = services.codec
    prompt_ids = await _prompt_ids(codec, body.prompt, services.settings.engine.max_model_len)
    generation = await services.policy.generate(prompt_ids, sampling)
    response.headers[VERSION_HEADER] = str(generation.policy_version)
    text, token_logprobs = await asyncio.to_thread(
        _decoded, codec, generation, body.logprobs is not None
    )
    logprobs = None
    if body.logprobs is not None:
        tokens = [t.token for t in token_logprobs]
        offsets = list(itertools.accumulate((len(t) for t in tokens), initial=0))[:-1]
        logprobs = CompletionLogprobs(
            tokens=tokens, token_logprobs=generation.logprobs, text_offset=offsets
        )
    choice = CompletionChoice(
        text=text,
        finish_reason=generation.finish_reason,
        logprobs=logprobs,
        token_ids=generation.token_ids if body.return_token_ids else None,
    )
    return Completion(
        model=body.model,
        choices=[choice],
        usage=usage(generation.prompt_tokens, len(generation.token_ids), generation.cached_tokens),
        policy_version=generation.policy_version,
        prompt_token_ids=list(prompt_ids) if body.return_token_ids else None,
    )


def _check_model(model: str, services: Services) -> None:
    served = services.settings.engine.model_name
    if model != served:
        raise BadRequest(f"this server serves model {served!r}, not {model!r}")


def _sampling(
    services: Services, temperature: float | None, top_p: float | None, max_tokens: int | None
) -> SamplingSettings:
    defaults = services.settings.engine.sampling
    return SamplingSettings(
        temperature=defaults.temperature if temperature is None else temperature,
        top_p=defaults.top_p if top_p is None else top_p,
        max_tokens=defaults.max_tokens if max_tokens is None else max_tokens,
    )


async def _prompt_ids(codec: ChatCodec, prompt: str | list[int], max_model_len: int) -> list[int]:
    """The prompt's token ids: text bounded, then tokenized off the loop; ids in the vocabulary."""
    if isinstance(prompt, str):
        codec.check_chars(len(prompt), max_model_len)
        return await asyncio.to_thread(codec.encode, prompt)
    if (largest := max(prompt)) >= codec.vocab_size:
        raise ChatInputError(
            f"token id {largest} is out of the vocabulary (ids are 0 to {codec.vocab_size - 1})"
        )
    return prompt


def _decoded(
    codec: ChatCodec, generation: Generation, logprobs: bool
) -> tuple[str, list[TokenLogprob]]:
    """The completion's text and, if asked, each token's text and logprob (CPU work: a
    thread's)."""
    text = codec.decode(generation.token_ids)
    return text, _token_logprobs(codec, generation) if logprobs else []


def _token_logprobs(codec: ChatCodec, generation: Generation) -> list[TokenLogprob]:
    out = []
    for token_id, logprob in zip(generation.token_ids, generation.logprobs, strict=True):
        text = codec.tokenizer.decode([token_id])
        out.append(TokenLogprob(token=text, logprob=logprob, bytes=list(text.encode())))
    return out
