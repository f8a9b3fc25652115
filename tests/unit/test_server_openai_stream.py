"""A finished chat completion as OpenAI's stream chunks and server-sent events."""

from __future__ import annotations

import json

from rollgym.contract.openai import (
    ChatChoice,
    ChatCompletion,
    ChatMessageOut,
    FunctionCall,
    ToolCall,
    usage,
)
from rollgym.server.routes.openai_stream import DONE, chat_chunks, sse

CALL = ToolCall(id="call_1", function=FunctionCall(name="calculator", arguments='{"x": 1}'))


def answer() -> ChatCompletion:
    text = ChatChoice(
        index=0,
        message=ChatMessageOut(content="5"),
        finish_reason="stop",
        token_ids=[7, 2],
        policy_version=3,
    )
    call = ChatChoice(
        index=1,
        message=ChatMessageOut(content=None, tool_calls=[CALL]),
        finish_reason="tool_calls",
        token_ids=[9, 9, 2],
        policy_version=3,
    )
    return ChatCompletion(
        model="rollgym-tiny",
        choices=[text, call],
        usage=usage(10, 5, 4),
        policy_version=3,
        prompt_token_ids=[1, 2, 3],
    )


def test_each_choice_opens_with_its_role_and_closes_with_its_reason_and_ids() -> None:
    whole = answer()
    chunks = chat_chunks(whole, include_usage=False)
    assert {(c.id, c.created, c.model) for c in chunks} == {(whole.id, whole.created, whole.model)}
    deltas = [
        (c.choices[0].index, c.choices[0].delta.model_dump(exclude_none=True)) for c in chunks
    ]
    assert deltas == [
        (0, {"role": "assistant", "content": ""}),
        (0, {"content": "5"}),
        (0, {}),
        (1, {"role": "assistant", "content": ""}),
        (1, {"tool_calls": [{"index": 0, **CALL.model_dump()}]}),
        (1, {}),
    ]
    closing = [c.choices[0] for c in chunks if c.choices[0].finish_reason]
    assert [(c.finish_reason, c.token_ids) for c in closing] == [
        ("stop", [7, 2]),
        ("tool_calls", [9, 9, 2]),
    ]


def test_the_last_chunk_carries_usage_version_and_prompt_ids_and_only_it() -> None:
    chunks = chat_chunks(answer(), include_usage=False)
    *before, last = chunks
    assert last.choices and last.usage == usage(10, 5, 4)
    assert last.policy_version == 3 and last.prompt_token_ids == [1, 2, 3]
    assert all(c.usage is None and c.policy_version is None for c in before)


def test_include_usage_adds_a_last_chunk_without_choices_as_openai_does() -> None:
    chunks = chat_chunks(answer(), include_usage=True)
    assert chunks[-1].choices == [] and chunks[-1].usage == usage(10, 5, 4)
    assert chunks[-2].usage is None and chunks[-2].choices[0].finish_reason == "tool_calls"


def test_events_are_data_lines_of_json_ending_with_done() -> None:
    events = list(sse(chat_chunks(answer(), include_usage=False)))
    assert events[-1] == DONE == "data: [DONE]\n\n"
    for event in events[:-1]:
        assert event.startswith("data: ") and event.endswith("\n\n")
        assert json.loads(event.removeprefix("data: "))["object"] == "chat.completion.chunk"
