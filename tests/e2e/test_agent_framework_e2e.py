"""An agent framework as the client: the OpenAI Agents SDK example plays Compute in groups
against ``rollgym serve`` (vLLM engine, Docker sandboxes), and one GRPO step trains on them,
once on the SDK's default model (``OpenAIResponsesModel``: the Responses API) and once on
its chat completions model, each against a server of its own.

The server runs the default model taught the tool-call format (``tool_model_dir``), so the
framework's LLM calls come back with ``python`` tool calls: the SDK runs them through the
session (the code runs in the episode's box) and sends each result back under its call's
id. The model copies operands poorly, so its answers are mostly wrong; a reply that is
neither a valid call nor one answer costs -0.05, and the agents of a group give up after 2
or 3 LLM calls in turn: where returns differ, that and nothing made up is what GRPO's
advantages come from.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from agents import ModelResponse, ModelSettings
from grpo_probe import assert_advantages_follow_rewards, probe_steps
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage

from examples.agents.httpx_agent import Task, agent_client, served_model
from examples.agents.openai_agents_agent import Episode, play_episode
from rollgym.contract.archive import ArchivePage
from rollgym.contract.wire import Trajectory
from rollgym.envs.compute import PYTHON_TOOL
from rollgym.run.server_process import ServerProcess
from rollgym.server.conversation.codec import ChatCodec
from rollgym.server.conversation.toolcalls import parse_tool_calls
from rollgym.trainer.client import ServerClient
from rollgym.trainer.config import TrainerConfig
from rollgym.trainer.loop import train

GROUP_SIZE, GROUPS = 4, 2
AGENT, AGENT_KEY = "sdk-agent", "e2e-sdk-agent-key-0123456789"
SETTINGS = ModelSettings(temperature=0.5, max_tokens=64)  # 78% of first replies call


@pytest.fixture(scope="module", params=["responses", "chat"])
def api(request) -> str:
    """Which of the SDK's models the agents play on."""
    return request.param


@pytest.fixture(scope="module")
def server(api, tmp_path_factory, tool_model_dir) -> Iterator[ServerProcess]:
    with ServerProcess(
        model_dir=tool_model_dir,
        data_dir=tmp_path_factory.mktemp(f"agents-e2e-{api}") / "server",
        threads=1,
        settings={
            "ROLLGYM_AGENTS__KEYS": json.dumps({AGENT: AGENT_KEY}),
            "ROLLGYM_AGENTS__DEFAULT_QUOTA__MAX_SANDBOXES": str(GROUP_SIZE),
            "ROLLGYM_SANDBOXES__POOL_SIZE": str(GROUP_SIZE),
        },
    ) as process:
        yield process


async def play_groups(url: str, api: str) -> list[Episode]:
    """``GROUPS`` groups of ``GROUP_SIZE`` framework agents, one group at a time (a box
    each); member i of a group stops after 2 + i % 2 LLM calls."""
    episodes: list[Episode] = []
    async with agent_client(url, AGENT_KEY) as http:
        model = await served_model(http)
        for seed in range(GROUPS):
            task = Task(env_id="rollgym/Compute-v0", seed=seed, group_size=GROUP_SIZE)
            episodes += await asyncio.gather(
                *(
                    play_episode(
                        http,
                        model,
                        task,
                        key=AGENT_KEY,
                        max_turns=2 + i % 2,
                        settings=SETTINGS,
                        api=api,
                    )
                    for i in range(GROUP_SIZE)
                )
            )
    return episodes


def seen(reply: ModelResponse) -> tuple[str | None, list[tuple[str, str]]]:
    """What the framework got from one LLM call: its text and its tool calls."""
    texts = [
        part.text
        for item in reply.output
        if isinstance(item, ResponseOutputMessage)
        for part in item.content
        if part.type == "output_text"
    ]
    calls = [
        (item.name, item.arguments)
        for item in reply.output
        if isinstance(item, ResponseFunctionToolCall)
    ]
    return "".join(texts) or None, calls


def model_spans(trajectory: Trajectory) -> list[list[int]]:
    """The sampled ids of each model turn (the runs of mask 1), in order."""
    spans: list[list[int]] = []
    previous = 0
    for token, mask in zip(trajectory.completion_ids, trajectory.loss_mask, strict=True):
        if mask and not previous:
            spans.append([])
        if mask:
            spans[-1].append(token)
        previous = mask
    return spans


def trained_groups(server: ServerProcess) -> dict[str, list[Trajectory]]:
    admin = {"Authorization": f"Bearer {server.admin_token}"}
    answer = httpx.get(f"{server.url}/admin/archive", params={"kind": "groups"}, headers=admin)
    page = ArchivePage.model_validate(answer.raise_for_status().json())
    return {
        item.group.group_id: item.group.trajectories
        for item in page.items
        if item.outcome == "trained"
    }


def train_one_step(
    server: ServerProcess, model_dir: Path, output_dir: Path, group_size: int, groups: int = 1
) -> dict[str, list[Trajectory]]:
    """One GRPO step on ``groups`` of the server's groups (after the trainer's first push of
    its weights); the groups trained so far, by id."""
    config = TrainerConfig(
        output_dir=output_dir,
        group_size=group_size,
        groups_per_batch=groups,
        max_staleness=1,
        total_steps=1,
        learning_rate=1e-3,
        pull_timeout_s=5.0,
        stall_timeout_s=240.0,
    )
    with ServerClient(server.client_config()) as client:
        start = client.policy_version()
        result = train(config, client, model_dir, printer=None)
        assert result.steps == 1 and client.policy_version() == start + 2  # weights + 1 step
    return trained_groups(server)


def test_framework_agents_in_groups_train_the_policy(
    api, server, tool_model_dir, tmp_path, monkeypatch
) -> None:
    episodes = asyncio.run(play_groups(server.url, api))
    assert all(e.closed["valid"] for e in episodes)
    assert all(e.closed["persisted"] for e in episodes if e.closed["group_pending"] == 0)
    assert len({e.group_id for e in episodes}) == GROUPS
    assert_tool_calls_ran_in_the_box(episodes)

    probe = probe_steps(monkeypatch)
    train_one_step(server, tool_model_dir, tmp_path / "run", GROUP_SIZE, GROUPS)

    [batch], [output] = probe.batches, probe.outputs
    assert set(batch.group_id) == {e.group_id for e in episodes}  # the framework's sessions
    assert all(batch.trajectory_valid)
    # the SDK's sampled groups can all earn the same (every answer wrong: seen in make test
    # and alone, 2026-12-05), so this test asks only that advantages follow the rewards
    assert_advantages_follow_rewards(batch, output, GROUPS, GROUP_SIZE, some_group_varies=False)

    # What was trained is what the framework's calls sampled, token for token.
    trained = trained_groups(server)
    by_id = {t.id: t for group in trained.values() for t in group}
    assert set(trained) == {e.group_id for e in episodes}
    assert set(by_id) == {e.closed["trajectory_id"] for e in episodes}
    assert sorted(batch.completion_ids) == sorted(t.completion_ids for t in by_id.values())
    codec = ChatCodec.from_model_dir(tool_model_dir)
    names = {PYTHON_TOOL.name}
    for episode in episodes:
        trajectory = by_id[episode.closed["trajectory_id"]]
        assert trajectory.source == "session" and trajectory.agent == AGENT
        assert trajectory.reward == pytest.approx(sum(episode.rewards))  # every step credited
        spans = model_spans(trajectory)
        # an answer cut by max_tokens is a turn the SDK raised on (the episode's last)
        assert len(spans) == len(trajectory.turns) == len(episode.replies) + episode.cut
        for span, turn, reply in zip(spans, trajectory.turns, episode.replies, strict=False):
            assert turn.completion_tokens == len(span)
            parsed = parse_tool_calls(codec.decode(span), names)
            written = (parsed.content or None, [(c.name, c.arguments) for c in parsed.calls])
            assert written == seen(reply)


def assert_tool_calls_ran_in_the_box(episodes: list[Episode]) -> None:
    """Tool calls made by the model, parsed by the server into the SDK's function calls,
    run by the env in the episode's box, and answered to the SDK under each call's id."""
    calls = [
        call
        for episode in episodes
        for reply in episode.replies
        for call in reply.output
        if isinstance(call, ResponseFunctionToolCall)
    ]
    assert len(calls) >= len(episodes) // 2, "the tool-calling model calls in most turns"
    assert {call.name for call in calls} == {"python"}
    assert all(isinstance(json.loads(call.arguments)["code"], str) for call in calls)
    answered = dict(result for episode in episodes for result in episode.tool_results)
    assert set(answered) <= {call.call_id for call in calls}
    assert len(answered) >= len(calls) // 2  # a turn's calls stop once the episode ends
    # what the box printed: the code ran there (a number, or Python's own error text)
    assert any(text.strip().lstrip("-").isdigit() for text in answered.values())
