"""What agent frameworks send to the chat route: tools, streams, n, stop and seed."""

from __future__ import annotations

import json

import pytest
from server_fakes import engine_factory, in_process, settings

from rollgym.engine.fake import FakeEngine
from rollgym.envs.toolformats import ToolParserError
from rollgym.server.app import create_app

MODEL = "rollgym-tiny"
SAID = 'Sure.\n<tool_call>{"name": "calculator", "arguments": {"expression": "2 + 3"}}</tool_call>'
CALCULATOR = {
    "type": "function",
    "function": {"name": "calculator", "parameters": {"type": "object"}},
}
ASK = [{"role": "user", "content": "What is 2 + 3?"}]


@pytest.fixture
def engine(codec) -> FakeEngine:
    """Every reply is ``SAID`` and the end of the turn; stop texts are honoured."""
    return FakeEngine(lambda prompt: [*codec.encode(SAID), codec.eos_id], decode=codec.decode)


async def chat(client, **body):
    return await client.post("/v1/chat/completions", json={"model": MODEL, "messages": ASK, **body})


async def test_a_tool_call_is_parsed_and_its_sampled_ids_returned_whole(client, codec) -> None:
    answer = await chat(client, tools=[CALCULATOR], return_token_ids=True)
    [choice] = answer.json()["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "Sure."
    [call] = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"] == {"name": "calculator", "arguments": '{"expression": "2 + 3"}'}
    assert choice["token_ids"] == [*codec.encode(SAID), codec.eos_id]


async def test_tool_choice_none_or_no_tools_leave_the_text_as_it_was_written(client) -> None:
    for body in ({"tools": [CALCULATOR], "tool_choice": "none"}, {}):
        [choice] = (await chat(client, **body)).json()["choices"]
        assert choice["message"]["content"] == SAID and choice["message"]["tool_calls"] is None
        assert choice["finish_reason"] == "stop"


async def test_stop_cuts_the_text_before_it_and_ends_the_generation(client, codec) -> None:
    [choice] = (await chat(client, stop="<tool_call>", return_token_ids=True)).json()["choices"]
    assert choice["message"]["content"] == "Sure.\n" and choice["finish_reason"] == "stop"
    ids = choice["token_ids"]  # up to the token that completed the stop text, none after it
    assert "<tool_call>" in codec.decode(ids) and "<tool_call>" not in codec.decode(ids[:-1])


async def test_n_choices_are_n_generations_counted_in_usage(client, engine) -> None:
    body = (await chat(client, n=3, seed=11)).json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert len(engine.prompts) == 3 and len(set(map(tuple, engine.prompts))) == 1
    per_choice = body["usage"]["completion_tokens"] // 3
    assert body["usage"]["prompt_tokens"] == len(engine.prompts[0]) and per_choice > 0


async def test_n_above_1_in_a_session_is_a_422(client) -> None:
    answer = await chat(client, n=2, session_id="abc")
    assert answer.status_code == 422 and "open n sessions" in answer.json()["message"]


async def test_a_stream_is_openai_chunks_ending_with_usage_version_and_done(client, codec) -> None:
    answer = await chat(client, tools=[CALCULATOR], stream=True, return_token_ids=True)
    assert answer.headers["content-type"].startswith("text/event-stream")
    assert answer.headers["X-Policy-Version"] == "0"
    events = answer.text.split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-2]]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert "".join(d.get("content", "") for d in deltas) == "Sure."
    [[call]] = [d["tool_calls"] for d in deltas if "tool_calls" in d]
    assert call["index"] == 0 and call["function"]["name"] == "calculator"
    last = chunks[-1]
    assert last["choices"][0]["finish_reason"] == "tool_calls"
    assert last["choices"][0]["token_ids"] == [*codec.encode(SAID), codec.eos_id]
    assert last["policy_version"] == 0 and last["usage"]["completion_tokens"] > 0
    assert last["prompt_token_ids"] == codec.first_prompt(ASK, tools=[CALCULATOR])


async def test_a_sessions_tool_call_is_recorded_as_sampled_and_its_reply_appended(
    client, engine, codec
) -> None:
    session = (await client.post("/v1/sessions", json={"env_id": "rollgym/GuessNumber-v0"})).json()
    messages = session["observation"]
    headers = {"X-Rollgym-Session": session["session_id"]}
    body = {"model": MODEL, "tools": [CALCULATOR], "messages": messages}
    first = await client.post("/v1/chat/completions", json=body, headers=headers)
    said = first.json()["choices"][0]["message"]
    result = {"role": "tool", "tool_call_id": said["tool_calls"][0]["id"], "content": "5"}
    body["messages"] = [*messages, said, result]  # the message back as the client got it
    second = await client.post("/v1/chat/completions", json=body, headers=headers)
    assert second.status_code == 200, second.text
    opening, context = engine.prompts
    sampled = [*codec.encode(SAID), codec.eos_id]
    assert context[: len(opening) + len(sampled)] == opening + sampled
    assert context[len(opening) + len(sampled) :] == codec.continuation([result], stopped=True)


async def test_a_completion_stops_at_a_stop_text_too(client) -> None:
    body = {"model": MODEL, "prompt": "2 + 3?", "stop": ["<tool_call>"], "seed": 1}
    [choice] = (await client.post("/v1/completions", json=body)).json()["choices"]
    assert choice["text"] == "Sure.\n" and choice["finish_reason"] == "stop"


async def test_a_session_turn_cut_by_a_stop_text_is_closed_by_an_end_of_turn_token(
    client, engine, codec
) -> None:
    session = (await client.post("/v1/sessions", json={"env_id": "rollgym/GuessNumber-v0"})).json()
    headers = {"X-Rollgym-Session": session["session_id"]}
    body = {"model": MODEL, "messages": session["observation"], "stop": "<tool_call>"}
    [choice] = (
        await client.post(
            "/v1/chat/completions", json={**body, "return_token_ids": True}, headers=headers
        )
    ).json()["choices"]
    note = {"role": "user", "content": "Go on."}
    body["messages"] = [*session["observation"], choice["message"], note]
    assert (await client.post("/v1/chat/completions", json=body, headers=headers)).is_success
    opening, context = engine.prompts
    closing = codec.continuation([note], stopped=False)
    assert closing[0] == codec.eos_id  # masked: the environment closes the model's turn
    assert context == opening + choice["token_ids"] + closing


async def test_a_tools_strict_flag_does_not_change_the_prompt(client, engine) -> None:
    """``strict`` is for the server, not the model: the Agents SDK's ``"strict": false``
    prompts the model exactly as the same tool without it (as an env's tools do)."""
    flagged = {"type": "function", "function": {**CALCULATOR["function"], "strict": False}}
    await chat(client, tools=[CALCULATOR])
    await chat(client, tools=[flagged])
    plain, with_flag = engine.prompts
    assert plain == with_flag


async def test_the_tool_parser_setting_picks_the_family_the_answers_are_read_in(
    tmp_path, codec
) -> None:
    """``tool_parser`` names vLLM's parser of the served model's family: under ``pythonic``
    a Python-style call is a call and a Hermes block is text, as the model wrote it."""
    pythonic = '[calculator(expression="2 + 3")]'
    replies = iter([pythonic, SAID])
    engine = FakeEngine(lambda prompt: [*codec.encode(next(replies)), codec.eos_id])
    app = create_app(
        settings(tmp_path, tool_parser="pythonic"), engine_factory=engine_factory(engine)
    )
    async with in_process(app) as client:
        [called] = (await chat(client, tools=[CALCULATOR])).json()["choices"]
        [said] = (await chat(client, tools=[CALCULATOR])).json()["choices"]
    [call] = called["message"]["tool_calls"]
    assert call["function"] == {"name": "calculator", "arguments": '{"expression": "2 + 3"}'}
    assert said["message"] == {"role": "assistant", "content": SAID, "tool_calls": None}


async def test_a_tool_parser_vllm_does_not_have_stops_the_server_at_start(tmp_path, engine) -> None:
    app = create_app(
        settings(tmp_path, tool_parser="hermes9"), engine_factory=engine_factory(engine)
    )
    with pytest.raises(ToolParserError, match="vLLM has no tool parser 'hermes9'"):
        async with in_process(app):
            pass
