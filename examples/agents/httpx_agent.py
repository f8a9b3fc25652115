"""An external agent in plain HTTP, with no framework: the session protocol, call by call.

Any language with an HTTP client and JSON can do what this file does; it uses ``httpx`` and
plain dicts so that every body on the wire is visible. One episode (``play_episode``):

1. ``POST /v1/sessions`` ``{"env_id", "seed", "group_size"}``: the opening messages and the
   env's ``tools``; the G sessions of one task key (env id, kwargs, seed) form one GRPO group.
2. each turn, ``POST /v1/chat/completions`` with header ``X-Rollgym-Session`` and the whole
   conversation (the messages as the server gave them, the model's answers as returned),
3. ``POST /v1/sessions/{id}/step`` ``{"model_answer": true}``: the env acts on the model's
   answer exactly as it was written (tool-call blocks included), so the model is credited;
   when the env answered each tool call with one ``tool`` message, ``tool_call_ids`` says
   which call each answers, and they go back as ``role: tool`` messages; otherwise the
   observation goes back as it is,
4. ``DELETE /v1/sessions/{id}`` when the env ends the episode or the turn budget is spent;
   the group is persisted for training once all G members have closed.

    python -m examples.agents.httpx_agent --url http://127.0.0.1:8000 --key "$ROLLGYM_AGENT_KEY"
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
from typing import Any

import httpx

SESSION_HEADER = "X-Rollgym-Session"


@dataclasses.dataclass
class Task:
    """What a group plays: G sessions on one task key."""

    env_id: str = "rollgym/ToolUse-v0"
    seed: int = 0
    group_size: int = 4
    env_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Episode:
    """One session as the agent saw it, and what closing it answered."""

    session_id: str
    group_id: str
    turns: int = 0
    rewards: list[float] = dataclasses.field(default_factory=list)
    closed: dict[str, Any] = dataclasses.field(default_factory=dict)


async def open_session(http: httpx.AsyncClient, task: Task, retries: int = 20) -> dict[str, Any]:
    """``POST /v1/sessions``; a full staleness window (429) is retried after ``Retry-After``."""
    body = {
        "env_id": task.env_id,
        "env_kwargs": task.env_kwargs,
        "seed": task.seed,
        "group_size": task.group_size,
    }
    for _ in range(retries):
        answer = await http.post("/v1/sessions", json=body)
        if answer.status_code != 429:
            break
        await asyncio.sleep(float(answer.headers.get("Retry-After", "1")))
    answer.raise_for_status()
    created: dict[str, Any] = answer.json()
    return created


async def play_episode(
    http: httpx.AsyncClient,
    model: str,
    task: Task,
    *,
    max_turns: int = 4,
    sampling: dict[str, Any] | None = None,
) -> Episode:
    """One session of ``task``, at most ``max_turns`` model turns (see the module docstring)."""
    created = await open_session(http, task)
    session_id = created["session_id"]
    episode = Episode(session_id, created["group_id"])
    messages: list[dict[str, Any]] = list(created["observation"])
    body = {"model": model, "tools": created["tools"], **(sampling or {})}
    header = {SESSION_HEADER: session_id}
    done = False
    while not done and episode.turns < max_turns:
        answer = await http.post(
            "/v1/chat/completions", json={**body, "messages": messages}, headers=header
        )
        if answer.status_code == 409 and answer.json()["error"] == "context_full":
            break  # the episode is over: the model's context is full
        answer.raise_for_status()
        messages.append(answer.json()["choices"][0]["message"])  # as returned
        episode.turns += 1
        stepped = await http.post(f"/v1/sessions/{session_id}/step", json={"model_answer": True})
        stepped.raise_for_status()
        step = stepped.json()
        episode.rewards.append(step["reward"])
        messages += replies_of(step)
        done = step["terminated"] or step["truncated"]
    closed = await http.delete(f"/v1/sessions/{session_id}")
    closed.raise_for_status()
    episode.closed = closed.json()
    return episode


def replies_of(step: dict[str, Any]) -> list[dict[str, Any]]:
    """The step's observation as the next messages: the results of the model's tool calls
    as ``role: tool`` messages naming their call, anything else as it is."""
    observation: list[dict[str, Any]] = step["observation"]
    ids = step.get("tool_call_ids")
    if not ids:
        return observation
    return [
        {"role": "tool", "tool_call_id": call_id, "content": message["content"]}
        for call_id, message in zip(ids, observation, strict=True)
    ]


async def served_model(http: httpx.AsyncClient) -> str:
    """The one model the server serves (``GET /v1/models``)."""
    answer = await http.get("/v1/models")
    answer.raise_for_status()
    return str(answer.json()["data"][0]["id"])


async def play_group(
    http: httpx.AsyncClient,
    task: Task,
    *,
    max_turns: int = 4,
    sampling: dict[str, Any] | None = None,
) -> list[Episode]:
    """The ``task.group_size`` sessions of one group, played at once."""
    model = await served_model(http)
    return list(
        await asyncio.gather(
            *(
                play_episode(http, model, task, max_turns=max_turns, sampling=sampling)
                for _ in range(task.group_size)
            )
        )
    )


def agent_client(url: str, key: str, *, timeout_s: float = 120.0) -> httpx.AsyncClient:
    """An HTTP client that sends the agent key (``Authorization: Bearer <key>``)."""
    return httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=timeout_s
    )


async def main(args: argparse.Namespace) -> None:
    task = Task(env_id=args.env_id, seed=args.seed, group_size=args.group_size)
    sampling = {"temperature": 1.0, "max_tokens": args.max_tokens}
    async with agent_client(args.url, args.key) as http:
        episodes = await play_group(http, task, max_turns=args.max_turns, sampling=sampling)
    for episode in episodes:
        print(json.dumps(dataclasses.asdict(episode)))


def arguments(description: str) -> argparse.ArgumentParser:
    """The examples' command line: the server, the agent key, the group's task, the budget."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--key", required=True, help="an agent key (ROLLGYM_AGENTS__KEYS)")
    parser.add_argument("--env-id", default="rollgym/ToolUse-v0")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=4, help="model turns per episode")
    parser.add_argument("--max-tokens", type=int, default=64, help="per model turn")
    return parser


if __name__ == "__main__":
    asyncio.run(main(arguments(__doc__.split("\n\n")[0]).parse_args()))
