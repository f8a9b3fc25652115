"""A session's tool-calling turn, as a framework that sees only parsed ``tool_calls`` plays it.

The real ToolUse env on a fake box (a host process) and a scripted engine that writes two
tool calls, then an answer: the framework steps with ``model_answer`` (it cannot rebuild
the text the model wrote), gets each call's result by its id, and the model is credited.
"""

from __future__ import annotations

import pytest
from server_fakes import ADMIN, in_process, sandboxed_app

from rollgym.contract.wire import PullResponse, SessionCreated, SessionStepResult, Trajectory
from rollgym.engine.fake import FakeEngine
from rollgym.envs.tool_use import ToolUseEnv

MODEL = "rollgym-tiny"
TOOL_USE = "rollgym/ToolUse-v0"
CALLS = (
    "Let me look.\n"
    '<tool_call>{"name": "list_files", "arguments": {}}</tool_call>\n'
    '<tool_call>{"name": "write_file", "arguments": {"path": "a.txt", "content": "hi"}}'
    "</tool_call>"
)
ANSWER = "<answer>nothing</answer>"


@pytest.fixture
def engine(codec) -> FakeEngine:
    """The first reply calls two tools; every later one gives an answer."""
    replies = iter([CALLS])
    return FakeEngine(lambda prompt: [*codec.encode(next(replies, ANSWER)), codec.eos_id])


@pytest.fixture
async def client(tmp_path, engine):
    async with in_process(sandboxed_app(tmp_path, engine)) as client:
        yield client


async def open_session(client) -> tuple[SessionCreated, list[dict]]:
    made = await client.post("/v1/sessions", json={"env_id": TOOL_USE, "seed": 3})
    assert made.status_code == 201, made.text
    session = SessionCreated.model_validate(made.json())
    assert session.tools == ToolUseEnv().tools  # the env's tools, to send as the chat's
    return session, [m.model_dump() for m in session.observation]


async def chat(client, session: SessionCreated, messages: list[dict]) -> dict:
    answer = await client.post(
        "/v1/chat/completions",
        json={"model": MODEL, "messages": messages, "tools": session.tools, "max_tokens": 256},
        headers={"X-Rollgym-Session": session.session_id},
    )
    assert answer.status_code == 200, answer.text
    message: dict = answer.json()["choices"][0]["message"]
    return message


async def step(client, session: SessionCreated, **body) -> SessionStepResult:
    stepped = await client.post(f"/v1/sessions/{session.session_id}/step", json=body)
    assert stepped.status_code == 200, stepped.text
    return SessionStepResult.model_validate(stepped.json())


async def persisted_episode(client) -> Trajectory:
    """The one episode in the buffer (a lone session's, persisted at its close)."""
    pulled = await client.post(
        "/admin/buffer/pull",
        json={"trainer_version": 0, "max_staleness": 0, "num_groups": 1, "timeout_s": 0},
        headers=ADMIN,
    )
    [trajectory] = PullResponse.model_validate(pulled.json()).groups[0].trajectories
    return trajectory


async def test_a_step_on_the_models_answer_runs_its_calls_and_names_them(client) -> None:
    session, messages = await open_session(client)
    message = await chat(client, session, messages)
    ids = [call["id"] for call in message["tool_calls"]]
    assert message["content"] == "Let me look." and len(set(ids)) == 2

    stepped = await step(client, session, model_answer=True)
    assert stepped.tool_call_ids == ids  # observation message i answers call ids[i]
    assert [m.role for m in stepped.observation] == ["tool", "tool"]
    assert stepped.observation[1].content == "wrote 2 characters to a.txt"

    # The framework hands back its tool results as tool messages; the session goes on.
    messages += [
        message,
        *(
            {"role": "tool", "tool_call_id": i, "content": m.content}
            for i, m in zip(ids, stepped.observation, strict=True)
        ),
    ]
    assert (await chat(client, session, messages))["content"] == ANSWER
    assert (await step(client, session, model_answer=True)).terminated


async def test_the_models_turns_are_credited_and_kept_as_written(client) -> None:
    session, messages = await open_session(client)
    await chat(client, session, messages)
    await step(client, session, model_answer=True)
    await step(client, session, action="my own words")  # the agent's, not the model's
    closed = (await client.delete(f"/v1/sessions/{session.session_id}")).json()
    assert closed["persisted"] and closed["valid"]

    trajectory = await persisted_episode(client)
    [turn] = trajectory.turns
    assert turn.env_s > 0 and trajectory.reward == 0.0  # the tool turn's; not the -0.05
    said = [(m.role, m.content) for m in trajectory.messages]
    assert said[2:] == [
        ("assistant", CALLS),  # as written, not as shown ("Let me look.")
        ("tool", said[3][1]),
        ("tool", "wrote 2 characters to a.txt"),
        ("assistant", "my own words"),
        ("user", said[6][1]),
    ]


async def test_a_step_that_sends_only_the_shown_content_earns_no_credit(client) -> None:
    session, messages = await open_session(client)
    message = await chat(client, session, messages)
    stepped = await step(client, session, action=message["content"])
    assert stepped.tool_call_ids is None and stepped.reward < 0  # rejected: no tool call
    await client.delete(f"/v1/sessions/{session.session_id}")
    trajectory = await persisted_episode(client)
    assert trajectory.reward == 0.0


async def test_model_answer_without_a_model_turn_is_a_409_and_both_fields_a_422(client) -> None:
    session, _ = await open_session(client)
    url = f"/v1/sessions/{session.session_id}/step"
    early = await client.post(url, json={"model_answer": True})
    assert early.status_code == 409 and "no model answer" in early.json()["message"]
    for body in ({"action": "x", "model_answer": True}, {}):
        refused = await client.post(url, json=body)
        assert refused.status_code == 422 and "model_answer" in refused.json()["message"]
