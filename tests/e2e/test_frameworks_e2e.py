"""The framework helpers against ``rollgym serve`` (vLLM engine, Docker sandboxes): a group of
LangChain, pydantic-ai and OpenAI Agents SDK agents each (``rollgym.frameworks``) plays
Compute, their tool calls run in the episodes' boxes by call id, and one GRPO step trains on
each framework's group.

The server runs the default model taught the tool-call format (``tool_model_dir``). Member
i of a group may make 2 + i % 2 LLM calls: the model's answers are mostly wrong, so where
returns differ within a group, that is what the advantages come from. The framework's own
default retries stay on (a retried call is the recorded turn, never a second one).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Iterator

import agents
import openai
import pydantic_ai
import pytest
from pydantic_ai.usage import UsageLimits
from test_agent_framework_e2e import train_one_step

from rollgym.contract.wire import SessionClosed
from rollgym.frameworks import langchain, openai_agents
from rollgym.frameworks import pydantic_ai as on_pydantic_ai
from rollgym.frameworks.session import AgentSession, EnvAnsweredAsAWhole
from rollgym.run.server_process import ServerProcess

GROUP_SIZE = 4
AGENT, AGENT_KEY = "framework-agent", "e2e-framework-agent-key-0123456789"
COMPUTE = "rollgym/Compute-v0"
Play = Callable[[AgentSession, int], Awaitable[None]]
# What ends a framework's run before a text answer: the env answered the calls as a whole,
# the episode is over (409), or the run spent its LLM calls (the SDK's MaxTurnsExceeded, and
# what it wraps a tool's exception in, are AgentsExceptions).
RUN_ENDS = (
    EnvAnsweredAsAWhole,
    openai.ConflictError,
    agents.AgentsException,
    pydantic_ai.UsageLimitExceeded,
)


@pytest.fixture(scope="module")
def server(tmp_path_factory, tool_model_dir) -> Iterator[ServerProcess]:
    with ServerProcess(
        model_dir=tool_model_dir,
        data_dir=tmp_path_factory.mktemp("frameworks-e2e") / "server",
        threads=1,
        settings={
            "ROLLGYM_AGENTS__KEYS": json.dumps({AGENT: AGENT_KEY}),
            "ROLLGYM_AGENTS__DEFAULT_QUOTA__MAX_SANDBOXES": str(GROUP_SIZE),
            "ROLLGYM_SANDBOXES__POOL_SIZE": str(GROUP_SIZE),
        },
    ) as process:
        yield process


async def play_langchain(session: AgentSession, calls: int) -> None:
    tools = langchain.structured_tools(session)
    by_name = {tool.name: tool for tool in tools}
    llm = langchain.chat_model(session, temperature=0.5, max_tokens=64).bind_tools(tools)
    messages: list = session.messages
    for _ in range(calls):
        said = await llm.ainvoke(messages)
        messages.append(said)
        if not said.tool_calls:
            messages += await session.step()
        else:
            messages += [await by_name[c["name"]].ainvoke(c) for c in said.tool_calls]
        if session.over:
            return


async def play_pydantic_ai(session: AgentSession, calls: int) -> None:
    system, user = session.messages
    agent = pydantic_ai.Agent(
        on_pydantic_ai.chat_model(session),
        system_prompt=system["content"],
        tools=on_pydantic_ai.tools(session),
        model_settings={"temperature": 0.5, "max_tokens": 64},
    )
    await agent.run(user["content"], usage_limits=UsageLimits(request_limit=calls))
    await session.step()  # the run ended with a text answer: the env acts on it


async def play_agents_sdk(session: AgentSession, calls: int) -> None:
    agent = agents.Agent(
        name="rollgym-agent",
        model=openai_agents.chat_model(session),
        model_settings=agents.ModelSettings(temperature=0.5, max_tokens=64),
        tools=openai_agents.function_tools(session),
        tool_use_behavior=openai_agents.stop_when_over(session),
    )
    no_tracing = agents.RunConfig(tracing_disabled=True)
    await agents.Runner.run(agent, session.messages, max_turns=calls, run_config=no_tracing)
    if not session.over:
        await session.step()


async def play_group(url: str, play: Play, seed: int) -> list[SessionClosed]:
    async def member(i: int) -> SessionClosed:
        session = await AgentSession.open(url, AGENT_KEY, COMPUTE, seed=seed, group_size=GROUP_SIZE)
        async with session:
            with contextlib.suppress(RUN_ENDS):
                await play(session, 2 + i % 2)
        assert session.closed is not None
        return session.closed

    return list(await asyncio.gather(*(member(i) for i in range(GROUP_SIZE))))


@pytest.mark.parametrize(
    ("play", "seed"),
    [(play_langchain, 0), (play_pydantic_ai, 1), (play_agents_sdk, 2)],
    ids=["langchain", "pydantic-ai", "agents-sdk"],
)
def test_a_frameworks_group_trains_the_policy(server, tool_model_dir, tmp_path, play, seed) -> None:
    closed = asyncio.run(play_group(server.url, play, seed))
    assert all(c.valid for c in closed), closed
    [group_id] = {c.group_id for c in closed}
    assert any(c.persisted and c.group_pending == 0 for c in closed)
    assert group_id in train_one_step(server, tool_model_dir, tmp_path / "run", GROUP_SIZE)
