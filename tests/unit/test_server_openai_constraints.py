"""What frameworks send by default: tool_choice, parallel_tool_calls, response_format.

Each is kept by constrained decoding: the route hands the engine an ``OutputConstraint``
(the fake records it; tests/engine/test_constrained_output.py runs them on vLLM). The
structural tags are checked here with xgrammar itself: what they accept is what the
model may write.
"""

from __future__ import annotations

import json

import openai
import pytest
import xgrammar
from server_fakes import AGENT_KEY
from xgrammar.testing import _is_grammar_accept_string

from rollgym.engine.base import OutputConstraint
from rollgym.engine.fake import FakeEngine

MODEL = "rollgym-tiny"
SAID = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2 + 3"}}\n</tool_call>'
CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
    },
}
PYTHON = {"type": "function", "function": {"name": "python", "parameters": {"type": "object"}}}
ASK = [{"role": "user", "content": "What is 2 + 3?"}]
CALC_CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1"}}\n</tool_call>'
PYTHON_CALL = '<tool_call>{"name": "python", "arguments": {"code": "1"}}</tool_call>'
ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "integer"}},
    "required": ["answer"],
}


@pytest.fixture
def engine(codec) -> FakeEngine:
    """Every reply is ``SAID`` (a call in the format the constraints allow) and the end."""
    return FakeEngine(lambda prompt: [*codec.encode(SAID), codec.eos_id])


async def chat(client, **body):
    return await client.post("/v1/chat/completions", json={"model": MODEL, "messages": ASK, **body})


def accepts(constraint: OutputConstraint | None, text: str) -> bool:
    assert constraint is not None and constraint.kind == "structural_tag"
    return _is_grammar_accept_string(xgrammar.Grammar.from_structural_tag(constraint.spec), text)


async def test_required_lets_the_model_write_calls_only(client, engine) -> None:
    answer = await chat(client, tools=[CALCULATOR, PYTHON], tool_choice="required")
    [choice] = answer.json()["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"][0]["function"]["name"] == "calculator"
    [constraint] = engine.constraints
    assert accepts(constraint, CALC_CALL) and accepts(constraint, CALC_CALL + PYTHON_CALL)
    assert not accepts(constraint, "The answer is 5.")
    assert not accepts(constraint, "Sure. " + CALC_CALL)


async def test_a_named_function_is_the_one_call_allowed(client, engine) -> None:
    named = {"type": "function", "function": {"name": "python"}}
    answer = await chat(client, tools=[CALCULATOR, PYTHON], tool_choice=named)
    assert answer.status_code == 200, answer.text
    [constraint] = engine.constraints
    assert accepts(constraint, PYTHON_CALL)
    assert not accepts(constraint, CALC_CALL) and not accepts(constraint, PYTHON_CALL * 2)


async def test_a_forced_calls_arguments_follow_its_schema(client, engine) -> None:
    """Strict or not: LangChain's ``with_structured_output(method="function_calling")``
    forces a call of a tool the model was never shown, whose arguments were otherwise free
    (a real model wrote them as a string)."""
    named = {"type": "function", "function": {"name": "calculator"}}
    for choice in ("required", named):
        await chat(client, tools=[CALCULATOR], tool_choice=choice)
    for constraint in engine.constraints:
        assert accepts(constraint, CALC_CALL)
        as_text = '<tool_call>{"name": "calculator", "arguments": "print(1)"}</tool_call>'
        mistyped = '<tool_call>{"name": "calculator", "arguments": {"expression": 1}}</tool_call>'
        assert not accepts(constraint, as_text) and not accepts(constraint, mistyped)
        blank_lines = CALC_CALL.replace('"1"}', '"1"\n\n\n}')
        assert not accepts(constraint, blank_lines)  # a run of whitespace: tokens eaten


async def test_no_parallel_calls_leaves_text_and_at_most_one_call(client, engine) -> None:
    answer = await chat(client, tools=[CALCULATOR, PYTHON], parallel_tool_calls=False)
    assert answer.status_code == 200, answer.text
    [constraint] = engine.constraints
    assert accepts(constraint, "Let me see.") and accepts(constraint, "Sure. " + PYTHON_CALL)
    assert not accepts(constraint, CALC_CALL + PYTHON_CALL)


async def test_a_strict_tools_arguments_follow_its_schema(client, engine) -> None:
    strict = {"type": "function", "function": {**CALCULATOR["function"], "strict": True}}
    await chat(client, tools=[strict])
    [constraint] = engine.constraints
    assert accepts(constraint, "Sure. " + CALC_CALL)
    bad = '<tool_call>{"name": "calculator", "arguments": {"expression": 1}}</tool_call>'
    assert not accepts(constraint, bad)


async def test_response_formats_become_json_constraints(client, engine) -> None:
    schema = {"name": "Answer", "schema": ANSWER_SCHEMA, "strict": True}
    await chat(client, response_format={"type": "json_schema", "json_schema": schema})
    await chat(client, response_format={"type": "json_object"})
    await chat(client, response_format={"type": "text"}, tools=[CALCULATOR])
    schema_constraint, object_constraint, free = engine.constraints
    assert schema_constraint == OutputConstraint("json", json.dumps(ANSWER_SCHEMA))
    assert object_constraint == OutputConstraint("json_object")
    assert free is None  # nothing asked: the engine samples freely


async def test_the_sampled_ids_are_returned_as_sampled(client, codec) -> None:
    body = await chat(client, tools=[CALCULATOR], tool_choice="required", return_token_ids=True)
    [choice] = body.json()["choices"]
    assert choice["token_ids"] == [*codec.encode(SAID), codec.eos_id]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"tool_choice": "required"}, "no tools were given"),
        (
            {"tools": [CALCULATOR], "tool_choice": {"type": "function", "function": {"name": "x"}}},
            "tool_choice names 'x'",
        ),
        (
            {
                "tools": [CALCULATOR],
                "tool_choice": "required",
                "response_format": {"type": "json_object"},
            },
            "not both",
        ),
        ({"response_format": {"type": "xml"}}, "response_format"),
        ({"tool_choice": "any"}, "tool_choice"),
    ],
)
async def test_what_cannot_be_kept_is_a_422_naming_it(client, engine, change, problem) -> None:
    answer = await chat(client, **change)
    assert answer.status_code == 422 and problem in answer.json()["message"], answer.text
    assert engine.constraints == []


async def test_the_policy_version_rides_in_system_fingerprint_too(client) -> None:
    # What a client keeps that drops fields it does not know (LangChain's response_metadata).
    body = (await chat(client)).json()
    assert body["policy_version"] == 0 and body["system_fingerprint"] == "policy-v0"
    streamed = (await chat(client, stream=True)).text.split("\n\n")[:-2]
    chunks = [json.loads(event.removeprefix("data: ")) for event in streamed]
    assert {chunk["system_fingerprint"] for chunk in chunks} == {"policy-v0"}


async def test_the_official_client_sends_them_and_reads_the_fingerprint(client, engine) -> None:
    openai_client = openai.AsyncOpenAI(
        base_url="http://server/v1", api_key=AGENT_KEY, http_client=client, max_retries=0
    )
    answer = await openai_client.chat.completions.create(
        model=MODEL,
        messages=ASK,
        tools=[CALCULATOR],
        tool_choice="required",
        parallel_tool_calls=False,
    )
    assert answer.system_fingerprint == "policy-v0"
    [call] = answer.choices[0].message.tool_calls
    assert call.function.name == "calculator"
    [constraint] = engine.constraints
    assert accepts(constraint, CALC_CALL) and not accepts(constraint, CALC_CALL * 2)
