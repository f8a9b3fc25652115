"""The OpenAI Responses API (``POST /v1/responses``), answered by the chat path.

A Responses call is turned into a chat request (its items into the chat conversation,
``server.conversation.response_items``; its tools, ``tool_choice`` and ``text.format``
into chat's) and answered by ``answer_chat``: the same quota, constraints, tool-call
parsing and, with a session (header ``X-Rollgym-Session`` or body ``session_id``), the same
recorded turn, token for token, as a chat completion. The chat answer becomes the
Response: a ``message`` item (its text; always there unless the answer is calls only)
and one ``function_call`` item per parsed call (``call_id`` is the chat tool call's id, the
one a session's step names). An answer cut by ``max_output_tokens`` is ``incomplete``.

``previous_response_id`` continues an earlier answer's conversation (``ResponseLog``):
the call sends only what is new. An answer made with ``store: false`` is not kept. ``stream: true`` sends the answer as the typed events
of ``responses_stream``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Request, Response
from fastapi.responses import StreamingResponse
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseUsage,
)
from pydantic import BaseModel, ValidationError

from rollgym.contract import api
from rollgym.contract.openai import ChatCompletion, ChatCompletionRequest
from rollgym.contract.responses import ResponseObject, ResponsesRequest
from rollgym.server.conversation.response_items import ChatMessage, chat_messages
from rollgym.server.errors import BadRequest
from rollgym.server.http.declared import declared
from rollgym.server.http.disconnect import stops_with_client
from rollgym.server.routes.deps import AgentDep, ServicesDep
from rollgym.server.routes.openai import VERSION_HEADER, answer_chat
from rollgym.server.routes.responses_stream import response_events, sse

router = APIRouter()


@declared(router, api.RESPONSES, response_model_exclude_none=True)
@stops_with_client
async def responses(
    body: ResponsesRequest,
    raw_request: Request,
    response: Response,
    services: ServicesDep,
    agent: AgentDep,
    x_rollgym_session: Annotated[str | None, Header()] = None,
) -> ResponseObject | StreamingResponse:
    session_id = body.session_id or x_rollgym_session
    earlier: list[ChatMessage] = []
    if body.previous_response_id is not None:
        earlier = services.responses.conversation(
            body.previous_response_id, agent=agent.name, session_id=session_id
        )
    added = chat_messages(body.items)
    messages = chat_messages([], body.instructions) + earlier + added
    completion = await answer_chat(chat_request(body, messages), services, agent, session_id)
    answer = response_of(body, completion)
    [choice] = completion.choices
    said = choice.message.model_dump(exclude_none=True)
    if body.store is not False:
        services.responses.keep(
            answer.id,
            agent=agent.name,
            session_id=session_id,
            previous=body.previous_response_id,
            added=[*added, {**said, "content": said.get("content") or ""}],
        )
    version = str(answer.policy_version)
    if body.stream:
        events = sse(response_events(answer))
        return StreamingResponse(
            events, media_type="text/event-stream", headers={VERSION_HEADER: version}
        )
    response.headers[VERSION_HEADER] = version
    return answer


def chat_request(body: ResponsesRequest, messages: list[ChatMessage]) -> ChatCompletionRequest:
    """``body`` as the chat request that answers it, on ``messages``."""
    tools = [
        {"type": "function", "function": tool.model_dump(exclude={"type"}, exclude_none=True)}
        for tool in body.tools or ()
    ]
    choice: Any = body.tool_choice
    if choice is not None and not isinstance(choice, str):
        choice = {"type": "function", "function": {"name": choice.name}}
    text_format = body.text.format if body.text is not None else None
    response_format: dict[str, Any] | None = None
    if text_format is not None and text_format.type == "json_schema":
        spec = text_format.model_dump(by_alias=True, exclude={"type"}, exclude_none=True)
        response_format = {"type": "json_schema", "json_schema": spec}
    elif text_format is not None:
        response_format = {"type": text_format.type}
    try:
        return ChatCompletionRequest.model_validate(
            {
                "model": body.model,
                "messages": messages,
                "tools": tools or None,
                "tool_choice": choice,
                "parallel_tool_calls": body.parallel_tool_calls,
                "response_format": response_format,
                "max_completion_tokens": body.max_output_tokens,
                "temperature": body.temperature,
                "top_p": body.top_p,
                "user": body.user,
            }
        )
    except ValidationError as exc:  # what only the whole conversation can show
        first = exc.errors()[0]
        raise BadRequest(f"{'.'.join(map(str, first['loc']))}: {first['msg']}") from exc


def response_of(body: ResponsesRequest, completion: ChatCompletion) -> ResponseObject:
    """The chat answer as a Response (see the module docstring)."""
    [choice] = completion.choices
    answer_id = completion.id.removeprefix("rollgym-")
    cut = choice.finish_reason == "length"
    status = "incomplete" if cut else "completed"
    message = choice.message
    output: list[Any] = []
    if message.content or not message.tool_calls:
        text = ResponseOutputText(type="output_text", text=message.content or "", annotations=[])
        output.append(
            ResponseOutputMessage(
                id=f"msg_{answer_id}",
                type="message",
                role="assistant",
                status=status,
                content=[text],
            )
        )
    for k, call in enumerate(message.tool_calls or ()):
        output.append(
            ResponseFunctionToolCall(
                type="function_call",
                id=f"fc_{answer_id}_{k}",
                call_id=call.id or f"call_{answer_id}_{k}",
                name=call.function.name,
                arguments=call.function.arguments,
                status="completed",
            )
        )
    version = completion.policy_version
    tokens = completion.usage
    return ResponseObject(
        id=f"resp_{answer_id}",
        object="response",
        created_at=completion.created,
        model=completion.model,
        status=status,
        incomplete_details={"reason": "max_output_tokens"} if cut else None,
        output=output,
        instructions=body.instructions,
        tools=[tool.model_dump(exclude_none=True) for tool in body.tools or ()],
        tool_choice=_dumped(body.tool_choice) or "auto",
        parallel_tool_calls=body.parallel_tool_calls is not False,
        text=_dumped(body.text),
        temperature=body.temperature,
        top_p=body.top_p,
        max_output_tokens=body.max_output_tokens,
        previous_response_id=body.previous_response_id,
        metadata={**(body.metadata or {}), "policy_version": str(version)},
        usage=ResponseUsage(
            input_tokens=tokens.prompt_tokens,
            input_tokens_details={
                "cached_tokens": tokens.prompt_tokens_details.get("cached_tokens", 0),
                "cache_write_tokens": 0,
            },
            output_tokens=tokens.completion_tokens,
            output_tokens_details={"reasoning_tokens": 0},
            total_tokens=tokens.total_tokens,
        ),
        policy_version=version,
        session_id=completion.session_id,
    )


def _dumped(value: Any) -> Any:
    """A request's model as the answer echoes it (a text or None as it is)."""
    if isinstance(value, BaseModel):
        return value.model_dump(by_alias=True, exclude_none=True)
    return value
