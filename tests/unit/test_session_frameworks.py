"""Sessions as agent frameworks call them: through OpenAI's own client at the session's base
URL, with its retries, and with the tool decorations frameworks add.

The real ToolUse env on a fake box and a scripted engine (the real twins:
tests/e2e/test_agent_framework_e2e.py, the OpenAI Agents SDK on the real engine)."""

from __future__ import annotations

import httpx
import openai
import pytest
from fastapi import FastAPI
from server_fakes import ADMIN, AGENT_KEY, in_process, sandboxed_app

from rollgym.contract.wire import SessionCreated
from rollgym.engine.fake import FakeEngine

MODEL = "rollgym-tiny"
TOOL_USE = "rollgym/ToolUse-v0"
CALL = '<tool_call>{"name": "list_files", "arguments": {}}</tool_call>'
WRITE = (
    '<tool_call>{"name": "write_file", "arguments": {"path": "a.txt", "content": "hi"}}</tool_call>'
)
ANSWER = "<answer>nothing</answer>"


@pytest.fixture
def engine(codec) -> FakeEngine:
    """The first reply calls a tool, the second writes a file and lists the files; every
    later one gives an answer."""
    replies = iter([CALL, f"{WRITE}\n{CALL}"])
    return FakeEngine(lambda prompt: [*codec.encode(next(replies, ANSWER)), codec.eos_id])


@pytest.fixture
async def client(tmp_path, engine):
    async with in_process(sandboxed_app(tmp_path, engine)) as client:
        yield client


async def open_session(client) -> SessionCreated:
    made = await client.post("/v1/sessions", json={"env_id": TOOL_USE, "seed": 3})
    assert made.status_code == 201, made.text
    return SessionCreated.model_validate(made.json())


def openai_at(client: httpx.AsyncClient, session: SessionCreated, **options) -> openai.AsyncOpenAI:
    """OpenAI's own client with the session's base URL, and nothing else of rollgym's."""
    return openai.AsyncOpenAI(
        base_url=f"http://server/v1/sessions/{session.session_id}/v1",
        api_key=AGENT_KEY,
        http_client=client,
        **options,
    )


async def test_an_openai_client_at_the_sessions_base_url_plays_its_turns(client, engine) -> None:
    session = await open_session(client)
    llm = openai_at(client, session)
    messages = [m.model_dump() for m in session.observation]
    said = await llm.chat.completions.create(model=MODEL, messages=messages, tools=session.tools)
    [call] = said.choices[0].message.tool_calls
    assert call.function.name == "list_files"
    stepped = await client.post(
        f"/v1/sessions/{session.session_id}/step", json={"model_answer": True}
    )
    assert stepped.json()["tool_call_ids"] == [call.id]  # the step answered the model's call
    episode = await client.delete(f"/v1/sessions/{session.session_id}")
    assert episode.json()["valid"] and len(engine.prompts) == 1


async def test_a_body_that_names_another_session_than_the_url_is_refused(client) -> None:
    session = await open_session(client)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "session_id": "x"}
    refused = await client.post(f"/v1/sessions/{session.session_id}/v1/chat/completions", json=body)
    assert refused.status_code == 422
    assert "drop session_id from the body" in refused.json()["message"]


async def test_a_retried_call_answers_with_the_recorded_turn(client, engine) -> None:
    """The OpenAI client's default retries (a timeout, a dropped answer) never make a second
    model turn: the call asked again gets the turn recorded for it."""
    session = await open_session(client)
    llm = openai_at(client, session)
    messages = [m.model_dump() for m in session.observation]
    first = await llm.chat.completions.create(model=MODEL, messages=messages, tools=session.tools)
    again = await llm.chat.completions.create(model=MODEL, messages=messages, tools=session.tools)
    assert len(engine.prompts) == 1  # generated once
    assert again.choices[0].message.content == first.choices[0].message.content
    [retried] = again.choices[0].message.tool_calls
    stepped = await client.post(
        f"/v1/sessions/{session.session_id}/step", json={"model_answer": True}
    )
    assert stepped.json()["tool_call_ids"] == [retried.id]  # the ids the client last got
    closed = (await client.delete(f"/v1/sessions/{session.session_id}")).json()
    pulled = await client.post(
        "/admin/buffer/pull",
        json={"trainer_version": 0, "max_staleness": 0, "num_groups": 1, "timeout_s": 0},
        headers=ADMIN,
    )
    [trajectory] = pulled.json()["groups"][0]["trajectories"]
    assert closed["valid"] and len(trajectory["turns"]) == 1  # one model turn, not two


async def test_a_call_with_other_messages_after_an_answer_is_a_new_turn(client, engine) -> None:
    session = await open_session(client)
    llm = openai_at(client, session)
    messages = [m.model_dump() for m in session.observation]
    first = await llm.chat.completions.create(model=MODEL, messages=messages)
    said = {"role": "assistant", "content": first.choices[0].message.content}
    follow = [*messages, said, {"role": "user", "content": "go on"}]
    await llm.chat.completions.create(model=MODEL, messages=follow)
    assert len(engine.prompts) == 2


async def test_the_env_tools_are_rendered_as_declared_whatever_the_client_adds(
    client, engine, codec
) -> None:
    """pydantic-ai marks every tool ``"strict": true`` and rewrites its schema for it; the
    model is still shown the env's tools as the env declared them."""
    session = await open_session(client)
    decorated = [
        {
            "type": "function",
            "function": {
                **tool["function"],
                "strict": True,
                "description": f"{tool['function']['description']} (as a framework saw it)",
                "parameters": {**tool["function"]["parameters"], "additionalProperties": False},
            },
        }
        for tool in session.tools
    ]
    llm = openai_at(client, session)
    messages = [m.model_dump() for m in session.observation]
    await llm.chat.completions.create(model=MODEL, messages=messages, tools=decorated)
    [prompt] = engine.prompts
    assert prompt == codec.first_prompt(messages, tools=session.tools)


async def test_each_tool_call_runs_by_its_id_and_the_env_steps_once(client, engine) -> None:
    """A framework runs one function per call: the first call's id steps the env with the
    answer (all its calls run), each id then gets its own result, and the next LLM call
    carries them back as tool messages, as the framework sends them."""
    session = await open_session(client)
    llm = openai_at(client, session)
    messages = [m.model_dump() for m in session.observation]
    first = await llm.chat.completions.create(model=MODEL, messages=messages, tools=session.tools)
    [call] = first.choices[0].message.tool_calls
    listed = await client.post(f"/v1/sessions/{session.session_id}/tool_calls/{call.id}")
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": listed.json()["content"]},
    ]
    second = await llm.chat.completions.create(model=MODEL, messages=messages, tools=session.tools)
    write, again = second.choices[0].message.tool_calls
    url = f"/v1/sessions/{session.session_id}/tool_calls"
    answered = [await client.post(f"{url}/{c.id}") for c in (again, write, again)]
    assert [a.status_code for a in answered] == [200, 200, 200]
    assert answered[0].json() == answered[2].json()  # asked twice: the same result
    assert "a.txt" in answered[0].json()["content"]  # the write ran first, as written
    assert not answered[1].json()["terminated"]
    stale = await client.post(f"{url}/{call.id}")  # a call of an earlier answer
    assert stale.status_code == 404 and "last model answer" in stale.json()["message"]
    closed = (await client.delete(f"/v1/sessions/{session.session_id}")).json()
    assert closed["valid"] and len(engine.prompts) == 2


async def test_calls_the_env_answers_as_a_whole_come_back_as_its_messages(tmp_path, codec) -> None:
    """A call the env refuses (here: arguments its schema rejects) is answered with the
    env's own message, not a tool message: each id says so and carries the messages."""
    bad = '<tool_call>{"name": "write_file", "arguments": {"path": "a.txt"}}</tool_call>'
    engine = FakeEngine(lambda prompt: [*codec.encode(bad), codec.eos_id])
    async with in_process(sandboxed_app(tmp_path, engine)) as client:
        session = await open_session(client)
        llm = openai_at(client, session)
        messages = [m.model_dump() for m in session.observation]
        said = await llm.chat.completions.create(
            model=MODEL, messages=messages, tools=session.tools
        )
        [call] = said.choices[0].message.tool_calls
        result = await client.post(f"/v1/sessions/{session.session_id}/tool_calls/{call.id}")
        answer = result.json()
        assert answer["content"] is None
        assert [m["role"] for m in answer["observation"]] == ["user"]
        assert "content" in answer["observation"][0]["content"]  # names the missing argument


class LosesTheFirstAnswer(httpx.AsyncBaseTransport):
    """The app's transport, but the first chat answer is lost on its way back (a timeout
    after the server answered): what makes an OpenAI client retry."""

    def __init__(self, app: FastAPI):
        self.inner = httpx.ASGITransport(app=app)
        self.lost = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if request.url.path.endswith("/chat/completions") and not self.lost:
            self.lost += 1
            raise httpx.ReadTimeout("the answer was lost", request=request)
        return response


async def test_the_openai_clients_own_retry_gets_the_recorded_turn(tmp_path, engine) -> None:
    app = sandboxed_app(tmp_path, engine)
    transport = LosesTheFirstAnswer(app)
    async with in_process(app) as client:
        session = await open_session(client)
        async with httpx.AsyncClient(transport=transport) as lossy:
            llm = openai.AsyncOpenAI(  # max_retries: the client's default (2)
                base_url=f"http://server/v1/sessions/{session.session_id}/v1",
                api_key=AGENT_KEY,
                http_client=lossy,
            )
            messages = [m.model_dump() for m in session.observation]
            said = await llm.chat.completions.create(
                model=MODEL, messages=messages, tools=session.tools
            )
        assert transport.lost == 1 and len(engine.prompts) == 1  # retried, generated once
        [call] = said.choices[0].message.tool_calls
        stepped = await client.post(
            f"/v1/sessions/{session.session_id}/step", json={"model_answer": True}
        )
        assert stepped.json()["tool_call_ids"] == [call.id]
