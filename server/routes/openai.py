"""OpenAI-compatible routes on the same engine: models, chat completions, completions.

Every answer carries the policy version (body ``policy_version``, header
``X-Policy-Version``). A chat call with a session id (header ``X-Rollgym-Session`` or body
``session_id``) is recorded as that session's model turn; see ``server.sessions``.

A chat answer's text is cut before its first ``stop`` text, and with ``tools`` (unless
``tool_choice`` is ``none``) its tool calls are parsed out of it by vLLM's parser of the served
model's family (``settings.tool_parser``, ``server.conversation.toolcalls``);
the sampled ids are recorded whole either way. ``tool_choice`` ``required`` or named,
``parallel_tool_calls: false`` and ``response_format`` constrain what is sampled
(``server.conversation.constraints``). A tool call's id names its answer, its choice
and its place (``call_<answer>_<choice>_<k>``), so a session's step can name the calls it
answered (``server.sessions``). ``n`` choices are ``n`` generations of one
prompt, choice i seeded with ``seed + i``. ``stream: true`` sends the answer as
server-sent events (``openai_stream``).

A client that leaves before its answer stops its generations (``server.http.disconnect``).
Chat and completions need an agent key (``server.access.agent_keys``): a call reserves what it
may generate (``max_tokens`` x ``n``) of the key's tokens-per-minute quota before it runs,
is charged what it generated and refunded the rest when it ends.
``/v1/models`` stays open, like ``/v1/policy``, which names the model too.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Sequence
from typing import Annotated

from fastapi import APIRouter, Header, Request, Response
from fastapi.responses import StreamingResponse

from rollgym.contract import api
from rollgym.contract.openai import (
    ChatChoice,
    ChatCompletion,
    ChatCompletionRequest,
    ChatLogprobs,
    ChatMessageOut,
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    FunctionCall,
    ModelCard,
    ModelList,
    TokenLogprob,
    ToolCall,
    policy_fingerprint,
    usage,
)
from rollgym.contract.wire import SamplingSettings
from rollgym.engine.base import Abandoned, Generation, OutputConstraint, PolicyEngine
from rollgym.envs.toolformats import ToolCallParser
from rollgym.server.access.agent_keys import Agent
from rollgym.server.conversation.codec import ChatCodec, ChatInputError
from rollgym.server.conversation.constraints import constraint_of
from rollgym.server.conversation.toolcalls import read_tool_calls
from rollgym.server.errors import BadRequest
from rollgym.server.http.declared import declared
from rollgym.server.http.disconnect import stops_with_client
from rollgym.server.http.offload import by_size
from rollgym.server.routes.deps import AgentDep, Services, ServicesDep
from rollgym.server.routes.openai_stream import chat_chunks, sse
from rollgym.server.sessions.manager import ModelAnswer

router = APIRouter()
VERSION_HEADER = "X-Policy-Version"


@declared(router, api.MODELS)
async def models(services: ServicesDep) -> ModelList:
    return ModelList(data=[ModelCard(id=services.settings.engine.model_name)])


@declared(router, api.CHAT)
@stops_with_client
async def chat_completions(
    body: ChatCompletionRequest,
    raw_request: Request,
    response: Response,
    services: ServicesDep,
    agent: AgentDep,
    x_rollgym_session: Annotated[str | None, Header()] = None,
) -> ChatCompletion | StreamingResponse:
    completion = await answer_chat(body, services, agent, body.session_id or x_rollgym_session)
    version = completion.policy_version
    if body.stream:
        include_usage = body.stream_options is not None and body.stream_options.include_usage
        return StreamingResponse(
            sse(chat_chunks(completion, include_usage=include_usage)),
            media_type="text/event-stream",
            headers={VERSION_HEADER: str(version)},
        )
    response.headers[VERSION_HEADER] = str(version)
    return completion


async def answer_chat(
    body: ChatCompletionRequest, services: Services, agent: Agent, session_id: str | None
) -> ChatCompletion:
    """The chat answer to ``body``, recorded as the turn of session ``session_id`` if one is
    named: the one path of every OpenAI door (chat completions, Responses)."""
    _check_model(body.model, services)
    sampling = _sampling(services, body.temperature, body.top_p, body.token_limit)
    messages = [m.model_dump(exclude_none=True) for m in body.messages]
    for message in messages:
        message.setdefault("content", "")
    tools = [t.rendered() for t in body.tools] if body.tools else None
    codec = services.codec
    content_chars = sum(len(m["content"]) for m in messages)  # rendered as they are
    codec.check_chars(content_chars, services.settings.engine.max_model_len)
    answer_id = uuid.uuid4().hex
    if session_id is not None and body.n > 1:
        raise BadRequest("n > 1 cannot be one session turn: open n sessions instead")
    constraint = await constraint_of(body, services.tool_parser.family)
    with services.quotas.reserve_tokens(agent, body.n * sampling.max_tokens) as hold:
        if session_id is not None:
            turn = _SessionAnswer(codec, services.tool_parser, body, answer_id)
            generation = await services.sessions.generate(
                session_id,
                messages,
                sampling,
                agent=agent.name,
                tools=tools,
                stop=body.stop_strings,
                seed=body.seed,
                answer=turn,
                constraint=constraint,
            )
            generations, prompt_ids, shown = [generation], None, turn.shown
        else:
            prompt_ids = await asyncio.to_thread(codec.first_prompt, messages, tools=tools)
            generations = await _n_generations(
                services.policy, codec, body, prompt_ids, sampling, constraint
            )
            shown = None
        hold.charge(sum(len(g.token_ids) for g in generations))
    made = (codec, services.tool_parser, body, generations, answer_id, shown)
    if shown is not None and not body.logprobs:  # nothing left to decode: no thread hop
        choices = _choices(*made)
    else:
        choices = await asyncio.to_thread(_choices, *made)
    first = generations[0]
    version = min(g.policy_version for g in generations)
    return ChatCompletion(
        id=f"rollgym-{answer_id}",
        model=body.model,
        choices=choices,
        usage=usage(
            first.prompt_tokens, sum(len(g.token_ids) for g in generations), first.cached_tokens
        ),
        policy_version=version,
        prompt_token_ids=prompt_ids if body.return_token_ids else None,
        session_id=session_id,
        system_fingerprint=policy_fingerprint(version),
    )


async def _n_generations(
    policy: PolicyEngine,
    codec: ChatCodec,
    body: ChatCompletionRequest,
    prompt_ids: list[int],
    sampling: SamplingSettings,
    constraint: OutputConstraint | None,
) -> list[Generation]:
    """``body.n`` generations of ``prompt_ids`` at once, the i-th seeded with ``seed + i``;
    cancelled, ``Abandoned`` with what they all had generated."""
    generated: list[int] = []

    async def choice(i: int) -> Generation:
        try:
            return await policy.generate(
                prompt_ids,
                sampling,
                stop_token_ids=[codec.eos_id],
                stop=body.stop_strings,
                seed=None if body.seed is None else body.seed + i,
                constraint=constraint,
            )
        except Abandoned as gone:  # a task keeps only one of its choices' errors: count here
            generated.append(gone.generated)
            raise

    try:
        return await asyncio.gather(*(choice(i) for i in range(body.n)))
    except asyncio.CancelledError:  # raised once every choice has ended
        raise Abandoned(sum(generated)) from None


@declared(router, api.COMPLETIONS)
@stops_with_client
async def completions(
    body: CompletionRequest,
    raw_request: Request,
    response: Response,
    services: ServicesDep,
    agent: AgentDep,
) -> Completion:
    _check_model(body.model, services)
    sampling = _sampling(services, body.temperature, body.top_p, body.max_tokens)
    codec = services.codec
    prompt_ids = await _prompt_ids(codec, body.prompt, services.settings.engine.max_model_len)
    stop = body.stop_strings
    with services.quotas.reserve_tokens(agent, sampling.max_tokens) as hold:
        generation = await services.policy.generate(prompt_ids, sampling, stop=stop, seed=body.seed)
        hold.charge(len(generation.token_ids))
    response.headers[VERSION_HEADER] = str(generation.policy_version)
    text, token_logprobs = await by_size(
        len(generation.token_ids), _decoded, codec, generation, body.logprobs is not None, stop
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


def _choices(
    codec: ChatCodec,
    parser: ToolCallParser,
    body: ChatCompletionRequest,
    generations: Sequence[Generation],
    answer_id: str,
    shown: Sequence[ChatMessageOut] | None = None,
) -> list[ChatChoice]:
    """The answer's choices, with their messages ``shown`` already or made here (decoding and
    per-token logprobs are CPU work: a thread's)."""
    choices = []
    for index, generation in enumerate(generations):
        if shown is not None:
            message = shown[index]
        else:
            written = _written(codec, body, generation)
            message = _message(parser, body, written, f"{answer_id}_{index}")
        called = message.tool_calls and generation.finish_reason == "stop"
        token_logprobs = _token_logprobs(codec, generation) if body.logprobs else None
        choices.append(
            ChatChoice(
                index=index,
                message=message,
                finish_reason="tool_calls" if called else generation.finish_reason,
                logprobs=None if token_logprobs is None else ChatLogprobs(content=token_logprobs),
                token_ids=generation.token_ids if body.return_token_ids else None,
                policy_version=generation.policy_version,
            )
        )
    return choices


class _SessionAnswer:
    """A session turn's answer, made once as the session records it: the ``ModelAnswer`` it
    keeps (as written, as shown) and the message its client is shown (``shown``)."""

    def __init__(
        self, codec: ChatCodec, parser: ToolCallParser, body: ChatCompletionRequest, answer_id: str
    ):
        self._codec, self._parser, self._body, self._answer_id = codec, parser, body, answer_id
        self.shown: list[ChatMessageOut] = []

    def __call__(self, generation: Generation) -> ModelAnswer:
        written = _written(self._codec, self._body, generation)
        message = _message(self._parser, self._body, written, f"{self._answer_id}_0")
        self.shown = [message]
        ids = tuple(call.id for call in message.tool_calls or () if call.id is not None)
        return ModelAnswer(written=written, content=message.content or "", tool_call_ids=ids)


def _written(codec: ChatCodec, body: ChatCompletionRequest, generation: Generation) -> str:
    """The answer's text as the model wrote it, up to the first ``stop`` text."""
    return _before_stop(codec.decode(generation.token_ids), body.stop_strings)


def _message(
    parser: ToolCallParser, body: ChatCompletionRequest, text: str, call_prefix: str
) -> ChatMessageOut:
    """The assistant's message as the client is shown it: ``text``, its tool calls parsed out
    by the served family's parser (ids ``call_<call_prefix>_<k>``)."""
    if not body.parses_tools:
        return ChatMessageOut(content=text)
    reply = read_tool_calls(text, [tool.rendered() for tool in body.tools or ()], parser)
    calls = [
        ToolCall(
            id=f"call_{call_prefix}_{k}",
            function=FunctionCall(name=call.name, arguments=call.arguments),
        )
        for k, call in enumerate(reply.calls)
    ]
    return ChatMessageOut(content=reply.content, tool_calls=calls or None)


def _before_stop(text: str, stop: Sequence[str]) -> str:
    """``text`` up to the first of the ``stop`` texts (the engine stopped on that one)."""
    cuts = [i for i in (text.find(s) for s in stop) if i >= 0]
    return text[: min(cuts)] if cuts else text


def _decoded(
    codec: ChatCodec, generation: Generation, logprobs: bool, stop: Sequence[str]
) -> tuple[str, list[TokenLogprob]]:
    """The completion's text and, if asked, each token's text and logprob (CPU work: a
    thread's)."""
    text = _before_stop(codec.decode(generation.token_ids), stop)
    return text, _token_logprobs(codec, generation) if logprobs else []


def _token_logprobs(codec: ChatCodec, generation: Generation) -> list[TokenLogprob]:
    out = []
    for token_id, logprob in zip(generation.token_ids, generation.logprobs, strict=True):
        text = codec.tokenizer.decode([token_id])
        out.append(TokenLogprob(token=text, logprob=logprob, bytes=list(text.encode())))
    return out
