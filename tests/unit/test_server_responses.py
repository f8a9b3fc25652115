"""The Responses API, called with the openai package's own client: items in, items out,
answered and recorded by the chat path (tests/e2e/test_agent_framework_e2e.py plays the
Agents SDK's default model on it against vLLM)."""

from __future__ import annotations

import json

import openai
import pytest
from server_fakes import AGENT_KEY

from rollgym.engine.base import OutputConstraint
from rollgym.engine.fake import FakeEngine

MODEL = "rollgym-tiny"
SAID = 'Sure.\n<tool_call>{"name": "calculator", "arguments": {"expression": "2 + 3"}}</tool_call>'
PARAMETERS = {"type": "object"}
CALCULATOR = {"type": "function", "name": "calculator", "parameters": PARAMETERS}


@pytest.fixture
def engine(codec) -> FakeEngine:
    """Every reply is ``SAID`` (text, then a call) and the end of the turn."""
    return FakeEngine(lambda prompt: [*codec.encode(SAID), codec.eos_id])


@pytest.fixture
def sdk(client) -> openai.AsyncOpenAI:
    """The openai package's client, on the app in-process."""
    return openai.AsyncOpenAI(
        base_url="http://server/v1", api_key=AGENT_KEY, http_client=client, max_retries=0
    )


async def test_an_answer_is_a_message_and_its_calls_as_items(sdk, client) -> None:
    answer = await sdk.responses.create(model=MODEL, input="What is 2 + 3?", tools=[CALCULATOR])
    message, call = answer.output
    assert answer.status == "completed" and answer.output_text == "Sure."
    assert message.type == "message" and message.role == "assistant"
    assert call.type == "function_call" and call.name == "calculator"
    assert json.loads(call.arguments) == {"expression": "2 + 3"}
    assert call.call_id.startswith("call_")
    assert answer.usage.output_tokens > 0 and answer.usage.input_tokens > 0
    assert answer.model_extra["policy_version"] == 0
    assert answer.metadata == {"policy_version": "0"}


async def test_items_make_the_conversation_a_chat_call_makes(sdk, engine) -> None:
    # One conversation, sent both ways: the engine sees one prompt.
    call_id = "call_x"
    items = [
        {"role": "user", "content": "What is 2 + 3?"},
        {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "Sure.", "annotations": []}]},
        {"type": "function_call", "call_id": call_id, "name": "calculator",
         "arguments": '{"expression": "2 + 3"}'},
        {"type": "function_call_output", "call_id": call_id, "output": "5"},
    ]  # fmt: skip
    await sdk.responses.create(
        model=MODEL, instructions="Be brief.", input=items, tools=[CALCULATOR]
    )
    function = {"name": "calculator", "arguments": '{"expression": "2 + 3"}'}
    calls = [{"id": call_id, "type": "function", "function": function}]
    await sdk.chat.completions.create(
        model=MODEL,
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is 2 + 3?"},
            {"role": "assistant", "content": "Sure.", "tool_calls": calls},
            {"role": "tool", "tool_call_id": call_id, "content": "5"},
        ],
        tools=[{"type": "function", "function": {"name": "calculator", "parameters": PARAMETERS}}],
    )
    responses_prompt, chat_prompt = engine.prompts
    assert responses_prompt == chat_prompt


async def test_a_stream_is_the_typed_events_of_the_same_answer(sdk) -> None:
    async with sdk.responses.stream(model=MODEL, input="2 + 3?", tools=[CALCULATOR]) as stream:
        events = [event async for event in stream]
        final = await stream.get_final_response()
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "Sure."
    [arguments] = [e.arguments for e in events if e.type == "response.function_call_arguments.done"]
    assert json.loads(arguments) == {"expression": "2 + 3"}
    assert final.output_text == "Sure." and final.output[1].name == "calculator"


async def test_a_cut_answer_is_incomplete(sdk) -> None:
    answer = await sdk.responses.create(model=MODEL, input="2 + 3?", max_output_tokens=2)
    assert answer.status == "incomplete"
    assert answer.incomplete_details.reason == "max_output_tokens"


async def test_text_format_and_tool_choice_constrain_as_on_chat(sdk, engine) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    text = {"format": {"type": "json_schema", "name": "n", "schema": schema}}
    await sdk.responses.create(model=MODEL, input="2 + 3?", text=text)
    named = {"type": "function", "name": "calculator"}
    await sdk.responses.create(model=MODEL, input="2 + 3?", tools=[CALCULATOR], tool_choice=named)
    as_json, as_call = engine.constraints
    assert as_json == OutputConstraint("json", json.dumps(schema))
    assert as_call is not None and as_call.kind == "structural_tag"
    assert '"name": "calculator"' in json.loads(as_call.spec)["format"]["tags"][0]["begin"]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"input": [{"type": "reasoning", "summary": []}]}, "reasoning"),
        ({"tools": [{"type": "web_search"}]}, "tools"),
        ({"include": ["message.output_text.logprobs"]}, "include"),
        ({"reasoning": {"effort": "low"}}, "reasoning"),
        ({"tool_choice": "required"}, "no tools were given"),
        ({"previous_response_id": "resp_nothing"}, "no such answer"),
    ],
)
async def test_what_is_not_implemented_is_refused_by_name(client, change, problem) -> None:
    answer = await client.post("/v1/responses", json={"model": MODEL, "input": "x", **change})
    assert answer.status_code in (404, 422) and problem in answer.text, answer.text


async def test_previous_response_id_stays_in_its_session(client) -> None:
    first = (await client.post("/v1/responses", json={"model": MODEL, "input": "x"})).json()
    elsewhere = await client.post(
        "/v1/responses",
        json={"model": MODEL, "input": "y", "previous_response_id": first["id"]},
        headers={"X-Rollgym-Session": "another"},
    )
    assert elsewhere.status_code == 422 and "continue it there" in elsewhere.text


async def test_an_answer_not_stored_cannot_be_continued(client) -> None:
    first = await client.post("/v1/responses", json={"model": MODEL, "input": "x", "store": False})
    body = {"model": MODEL, "input": "y", "previous_response_id": first.json()["id"]}
    answer = await client.post("/v1/responses", json=body)
    assert answer.status_code == 404 and "no such answer" in answer.text
