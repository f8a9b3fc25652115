"""The framework helpers (``rollgym.frameworks``): LangChain, pydantic-ai and the OpenAI
Agents SDK, each the real library, play a session of the real ToolUse env (a fake box)
against a scripted engine: a tool call, then a text answer. Each framework runs the call
through its own tool machinery, the text answer is stepped, and the episode is one the
trainer takes (the real twins, on vLLM and a GRPO step: tests/e2e/test_frameworks_e2e.py).
"""

from __future__ import annotations

import agents
import pydantic_ai
import pytest
from server_fakes import ADMIN, AGENT_KEY, in_process, sandboxed_app

from rollgym.engine.fake import FakeEngine
from rollgym.frameworks import langchain, openai_agents
from rollgym.frameworks import pydantic_ai as on_pydantic_ai
from rollgym.frameworks.session import AgentSession

TOOL_USE = "rollgym/ToolUse-v0"
CALL = '<tool_call>{"name": "list_files", "arguments": {}}</tool_call>'
ANSWER = "<answer>nothing</answer>"


@pytest.fixture
def engine(codec) -> FakeEngine:
    """The first reply lists the files; every later one answers."""
    replies = iter([CALL])
    return FakeEngine(lambda prompt: [*codec.encode(next(replies, ANSWER)), codec.eos_id])


@pytest.fixture
async def client(tmp_path, engine):
    async with in_process(sandboxed_app(tmp_path, engine)) as client:
        yield client


async def open_session(client) -> AgentSession:
    return await AgentSession.open("http://server", AGENT_KEY, TOOL_USE, seed=3, http=client)


async def assert_one_trained_episode(client, session: AgentSession, engine) -> None:
    """Two model turns (the call, the answer), both credited, in a valid episode."""
    closed = await session.close()
    assert closed.valid and closed.persisted and len(engine.prompts) == 2
    pulled = await client.post(
        "/admin/buffer/pull",
        json={"trainer_version": 0, "max_staleness": 0, "num_groups": 1, "timeout_s": 0},
        headers=ADMIN,
    )
    [trajectory] = pulled.json()["groups"][0]["trajectories"]
    assert len(trajectory["turns"]) == 2


async def test_langchain_plays_a_session_through_its_tools(client, engine) -> None:
    session = await open_session(client)
    tools = langchain.structured_tools(session)
    llm = langchain.chat_model(session).bind_tools(tools)
    messages: list = session.messages
    said = await llm.ainvoke(messages)
    [call] = said.tool_calls
    [tool] = [t for t in tools if t.name == call["name"]]
    result = await tool.ainvoke({**call, "type": "tool_call"})  # a ToolMessage, id and all
    assert result.tool_call_id == call["id"] and result.content == "names.txt\n"
    answer = await llm.ainvoke([*messages, said, result])
    assert answer.content == ANSWER and not answer.tool_calls
    reply = await session.step()
    assert session.over and reply  # the answer ended the episode; the env said so
    await assert_one_trained_episode(client, session, engine)


async def test_pydantic_ai_plays_a_session_through_its_tools(client, engine) -> None:
    session = await open_session(client)
    system, user = session.messages
    agent = pydantic_ai.Agent(
        on_pydantic_ai.chat_model(session),
        system_prompt=system["content"],
        tools=on_pydantic_ai.tools(session),
    )
    result = await agent.run(user["content"])
    assert result.output == ANSWER
    returns = [
        part
        for message in result.all_messages()
        for part in message.parts
        if isinstance(part, pydantic_ai.messages.ToolReturnPart)
    ]
    assert [part.tool_name for part in returns] == ["list_files"]
    await session.step()
    assert session.over
    await assert_one_trained_episode(client, session, engine)


async def test_the_agents_sdk_plays_a_session_through_its_tools(client, engine) -> None:
    session = await open_session(client)
    agent = agents.Agent(
        name="rollgym-agent",
        model=openai_agents.chat_model(session),
        tools=openai_agents.function_tools(session),
        tool_use_behavior=openai_agents.stop_when_over(session),
    )
    result = await agents.Runner.run(
        agent, session.messages, run_config=agents.RunConfig(tracing_disabled=True)
    )
    assert result.final_output == ANSWER
    outputs = [i for i in result.new_items if isinstance(i, agents.ToolCallOutputItem)]
    assert [o.output for o in outputs] == ["names.txt\n"]
    await session.step()
    assert session.over
    await assert_one_trained_episode(client, session, engine)
