"""The OpenAI Agents SDK example on its tool-calling path, which the untrained model of the
e2e test rarely takes: a scripted engine writes the tool calls, the real ToolUse env runs
them on a fake box (a host process), the app serves on loopback (the SDK's own client),
through the SDK's default model (the Responses API) and its chat completions model."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator

import pytest
from agents import ModelSettings
from openai.types.responses import ResponseFunctionToolCall
from server_fakes import AGENT_KEY, sandboxed_app

from examples.agents.httpx_agent import Task, agent_client
from examples.agents.openai_agents_agent import Episode, play_episode
from rollgym.engine.fake import FakeEngine
from rollgym.run.loopback import on_loopback

CALLS = (
    '<tool_call>{"name": "list_files", "arguments": {}}</tool_call>\n'
    '<tool_call>{"name": "write_file", "arguments": {"path": "a.txt", "content": "hi"}}'
    "</tool_call>"
)
REFUSED = '<tool_call>{"name": "python", "arguments": {"code": ""}}</tool_call>'  # minLength 1
ANSWER = "<answer>nothing</answer>"
SETTINGS = ModelSettings(temperature=1.0, max_tokens=256)


@contextlib.asynccontextmanager
async def served(tmp_path, codec, first_reply: str) -> AsyncIterator[str]:
    """The app on loopback; its engine writes ``first_reply``, then answers."""
    replies: Iterator[str] = iter([first_reply])
    engine = FakeEngine(lambda prompt: [*codec.encode(next(replies, ANSWER)), codec.eos_id])
    async with on_loopback(sandboxed_app(tmp_path, engine)) as url:
        yield url


async def play(url: str, api: str) -> Episode:
    async with agent_client(url, AGENT_KEY) as http:
        task = Task(seed=3, group_size=1)
        return await play_episode(
            http, "rollgym-tiny", task, key=AGENT_KEY, max_turns=4, settings=SETTINGS, api=api
        )


@pytest.mark.parametrize(
    ("first_reply", "calls", "first_reward"),
    [(CALLS, ["list_files", "write_file"], 0.0), (REFUSED, ["python"], -0.05)],
    ids=["answered-call-by-call", "refused-by-the-env"],
)
@pytest.mark.parametrize("api", ["responses", "chat"])
async def test_the_sdk_agent_steps_the_models_tool_calls_and_goes_on(
    tmp_path, codec, first_reply, calls, first_reward, api
) -> None:
    async with served(tmp_path, codec, first_reply) as url:
        episode = await play(url, api)
    first, last = episode.replies
    assert [i.name for i in first.output if isinstance(i, ResponseFunctionToolCall)] == calls
    assert [part.text for item in last.output for part in item.content] == [ANSWER]  # type: ignore[union-attr]
    # one step for the tool-calling turn, whatever the env said; one for the answer, which
    # ends the episode; the second LLM call extended the session (or it would be a 409)
    assert episode.rewards == [first_reward, 0.0]
    assert episode.closed["persisted"] and episode.closed["valid"]
