"""External agents at scale: sessions in groups, and what a session costs over the runner.

    .venv/bin/python -m bench.sessions [--agents 64] [--episodes 2] [--turns 4]

Two parts, one table:

1. **64 agents**: ``rollgym serve`` (vLLM engine on the default model, a Docker pool with a
   box per agent) and ``--agents`` concurrent external agents, each the plain-httpx client
   of ``examples/agents/httpx_agent.py`` with its own agent key, in groups of
   ``--group-size`` on ToolUse (sandboxed), each playing ``--episodes`` episodes of
   ``--turns`` model turns. A consumer pulls and acks like a trainer. Rows: p50/p99 per
   call (create, chat, step, close) as the agents saw them; episodes finished (closed with a
   trajectory) vs trajectories persisted (delivered to the consumer, and the server's
   ``rollgym_trajectories_total{source="session"}``); errors (any failed call; a 429
   ``window_full`` that was retried counts apart). Targets: 0 errors, 0 lost.
2. **a session's overhead per turn over the runner**: one app in this process on the same
   engine, env and pool, serving over uvicorn on loopback; one agent at a time, so nothing
   queues. ``--overhead-episodes`` episodes of ``--overhead-turns`` turns through a
   session (the same httpx client) and as many through the rollout runner's
   ``EpisodeRunner``, interleaved. The server's own time per turn, what is neither the
   engine call (its wall time, vLLM's hand-offs included, timed around the engine both
   paths share) nor the env step (``TurnRecord.env_s``), each path measured inside the
   server: a session's turn is one chat and one step request (their time in the app, from
   the first byte in to the last byte out; uvicorn's HTTP parsing and its access log,
   off here, left out), paired as a steady-state turn (the chat of turn k with the step of
   turn k-1); the runner's is the time between the starts of two consecutive generations
   of one episode. Target: the session's at most 2 ms over the runner's (median).

On a 2-core machine the figures move with other load: compare within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import secrets
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import httpx

from bench.server import Row, print_table
from examples.agents.httpx_agent import Task, agent_client, play_episode, served_model
from rollgym.contract.paths import default_model_dir
from rollgym.contract.wire import PullRequest, PullResponse, SamplingSettings, Trajectory
from rollgym.engine.base import Generation
from rollgym.engine.config import EngineConfig
from rollgym.engine.vllm.engine import VLLMEngine
from rollgym.run.loopback import on_loopback
from rollgym.run.server_process import ServerProcess
from rollgym.server.access.agent_keys import AgentKeysConfig
from rollgym.server.app import create_app
from rollgym.server.config import SandboxSettings, ServerSettings
from rollgym.server.rollout.episode import EpisodeSpec

ENV_ID = "rollgym/ToolUse-v0"
CALLS = ("create", "chat", "step", "close")


def call_kind(method: str, path: str) -> str:
    if path == "/v1/sessions":
        return "create"
    if path == "/v1/chat/completions":
        return "chat"
    if path.endswith("/step"):
        return "step"
    return "close" if method == "DELETE" else "other"


@dataclasses.dataclass
class CallLog:
    """Every agent call's latency by kind, as the agents saw it, and what failed."""

    seconds: dict[str, list[float]] = dataclasses.field(
        default_factory=lambda: {kind: [] for kind in CALLS}
    )
    retried: int = 0  # 429 window_full / quota answers, retried after Retry-After
    errors: list[str] = dataclasses.field(default_factory=list)

    def hooks(self) -> dict[str, list[Callable[..., Awaitable[None]]]]:
        async def sent(request: httpx.Request) -> None:
            request.extensions["started"] = time.perf_counter()

        async def answered(response: httpx.Response) -> None:
            kind = call_kind(response.request.method, response.request.url.path)
            if response.status_code == 429:
                self.retried += 1
            elif kind in self.seconds:
                elapsed = time.perf_counter() - response.request.extensions["started"]
                self.seconds[kind].append(elapsed)

        return {"request": [sent], "response": [answered]}


# --- part 1: 64 agents against rollgym serve ------------------------------------------


async def agent(
    url: str, key: str, log: CallLog, tasks: Sequence[Task], args: argparse.Namespace
) -> list[dict[str, Any]]:
    """One external agent: its episodes, one after another; what closing each answered."""
    closed = []
    sampling = {"temperature": 1.0, "max_tokens": args.max_tokens}
    async with agent_client(url, key) as http:
        http.event_hooks = log.hooks()
        model = await served_model(http)
        for task in tasks:
            try:
                episode = await play_episode(
                    http, model, task, max_turns=args.turns, sampling=sampling
                )
            except httpx.HTTPError as exc:
                log.errors.append(f"{type(exc).__name__}: {exc}"[:300])
                continue
            closed.append(episode.closed)
    return closed


async def consume(url: str, token: str, stop: asyncio.Event) -> list[Trajectory]:
    """Pull and ack every group the server persists, like a trainer, until ``stop`` and
    the buffer is empty."""
    received: list[Trajectory] = []
    pull = PullRequest(trainer_version=0, max_staleness=1, num_groups=64, timeout_s=1.0)
    admin = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=admin, timeout=60) as http:
        while True:
            answer = await http.post("/admin/buffer/pull", json=pull.model_dump(mode="json"))
            groups = PullResponse.model_validate(answer.raise_for_status().json()).groups
            if groups:
                ids = [g.group_id for g in groups]
                (await http.post("/admin/buffer/ack", json={"group_ids": ids})).raise_for_status()
                received += [t for g in groups for t in g.trajectories]
            elif stop.is_set():
                return received


def persisted_count(url: str) -> float:
    """``rollgym_trajectories_total{source="session"}`` from the server's metrics."""
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith('rollgym_trajectories_total{source="session"}'):
            return float(line.split()[-1])
    return 0.0


async def agents_at_once(
    url: str, token: str, keys: dict[str, str], args: argparse.Namespace
) -> tuple[CallLog, list[dict[str, Any]], list[Trajectory], float]:
    """Every agent at once, groups of ``--group-size``, and a consumer; (calls, what each
    close answered, what the consumer received, wall seconds)."""
    log = CallLog()
    groups = args.agents // args.group_size
    names = sorted(keys)
    stop = asyncio.Event()
    consumer = asyncio.create_task(consume(url, token, stop))
    started = time.perf_counter()
    closed = await asyncio.gather(
        *(
            agent(
                url,
                keys[names[i]],
                log,
                [
                    Task(
                        ENV_ID,
                        seed=round_ * groups + i // args.group_size,
                        group_size=args.group_size,
                    )
                    for round_ in range(args.episodes)
                ],
                args,
            )
            for i in range(groups * args.group_size)
        )
    )
    wall = time.perf_counter() - started
    stop.set()
    received = await consumer
    return log, [c for agent_closed in closed for c in agent_closed], received, wall


def load_rows(args: argparse.Namespace, model_dir: Path) -> list[Row]:
    keys = {f"agent{i:02d}": secrets.token_hex(16) for i in range(args.agents)}
    with (
        tempfile.TemporaryDirectory() as tmp,
        ServerProcess(
            model_dir=model_dir,
            data_dir=Path(tmp) / "server",
            threads=1,
            settings={
                "ROLLGYM_AGENTS__KEYS": json.dumps(keys),
                "ROLLGYM_AGENTS__DEFAULT_QUOTA__MAX_SANDBOXES": "1",
                "ROLLGYM_SANDBOXES__POOL_SIZE": str(args.agents),
                "ROLLGYM_SANDBOXES__ACQUIRE_TIMEOUT_S": "300",
            },
            startup_timeout_s=600,
        ) as server,
    ):
        log, closed, received, wall = asyncio.run(
            agents_at_once(server.url, server.admin_token, keys, args)
        )
        counted = persisted_count(server.url)
    finished = [c for c in closed if c["trajectory_id"] is not None]
    delivered = {t.id for t in received}
    lost = len({c["trajectory_id"] for c in finished} - delivered)
    rows: list[Row] = []
    for kind in CALLS:
        p50, p99 = statistics.median(log.seconds[kind]), percentile(log.seconds[kind], 0.99)
        rows.append(
            (
                f"{args.agents} agents: {kind}",
                f"p50 {p50 * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms",
                "",
                "",
                f"{len(log.seconds[kind])} calls",
            )
        )
    rows += [
        (
            f"{args.agents} agents: episodes finished vs persisted",
            f"{len(finished)} finished",
            f"{len(delivered)} delivered, {counted:.0f} counted",
            f"lost {lost}",
            f"equal, 0 lost; {len(finished) / wall:.1f} episodes/s over {wall:.0f} s",
        ),
        (
            f"{args.agents} agents: errors",
            f"{len(log.errors)}",
            "",
            "",
            f"0; 429s retried: {log.retried}" + (f"; first: {log.errors[0]}" if log.errors else ""),
        ),
    ]
    return rows


# --- part 2: a session's turn vs the runner's, inside one server -----------------------


class RequestTimer:
    """ASGI wrapper: each HTTP request's time in the app, first byte in to last byte out."""

    def __init__(self, app: Any):
        self.app = app
        self.calls: list[tuple[str, float]] = []  # (kind, seconds), in order

    async def __call__(
        self, scope: MutableMapping[str, Any], receive: Callable[..., Any], send: Callable[..., Any]
    ) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        try:
            await self.app(scope, receive, send)
        finally:
            kind = call_kind(scope["method"], scope["path"])
            self.calls.append((kind, time.perf_counter() - started))


class EngineClock:
    """The app's engine, with each generation's start and end kept: the engine's wall time
    (queue, generation, and vLLM's own hand-offs) is the model's, on either path."""

    def __init__(self, engine: Any):
        self._engine = engine
        self.spans: list[tuple[float, float]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    async def generate(self, *args: Any, **kwargs: Any) -> Generation:
        started = time.perf_counter()
        try:
            generation: Generation = await self._engine.generate(*args, **kwargs)
            return generation
        finally:
            self.spans.append((started, time.perf_counter()))


def env_s(trajectory: Trajectory) -> list[float]:
    """Each turn's env step (``env.step``, sandbox included)."""
    return [turn.env_s for turn in trajectory.turns]


def runner_turns(spans: Sequence[tuple[float, float]], trajectory: Trajectory) -> list[float]:
    """The runner's own time of each turn but the last: from one generation's start to the
    next's, less that generation and the env step in between."""
    return [
        later - end - env
        for (_, end), (later, _), env in zip(spans, spans[1:], env_s(trajectory), strict=False)
    ]


def session_turns(
    calls: Sequence[tuple[str, float]],
    spans: Sequence[tuple[float, float]],
    trajectory: Trajectory,
) -> list[float]:
    """A session's own time per steady-state turn: turn k's chat and turn k-1's step
    (request times in the app), less turn k's generation and turn k-1's env step."""
    chats = [s for kind, s in calls if kind == "chat"]
    steps = [s for kind, s in calls if kind == "step"]
    engine = [end - start for start, end in spans]
    envs = env_s(trajectory)
    turns = min(len(chats), len(steps) + 1, len(engine), len(envs))
    return [chats[k] - engine[k] + steps[k - 1] - envs[k - 1] for k in range(1, turns)]


async def overhead(args: argparse.Namespace, model_dir: Path) -> tuple[list[float], list[float]]:
    key = secrets.token_hex(16)
    with tempfile.TemporaryDirectory() as tmp:
        settings = ServerSettings(
            admin_token=secrets.token_hex(16),
            data_dir=Path(tmp),
            engine=EngineConfig(model_dir=model_dir),
            sandboxes=SandboxSettings(pool_size=2),
            agents=AgentKeysConfig(keys={"bench": key}),
        )
        app = create_app(settings, engine_factory=lambda config: EngineClock(VLLMEngine(config)))
        timer = RequestTimer(app)
        async with on_loopback(timer) as url, agent_client(url, key) as http:
            services = app.state.services
            engine: EngineClock = services.engine
            runner = services.episodes  # the app's runner's episodes, on the same engine
            model = await served_model(http)
            admin = {"Authorization": f"Bearer {settings.admin_token.get_secret_value()}"}
            sampling = SamplingSettings(temperature=1.0, max_tokens=args.max_tokens)
            sessions, runs = [], []
            for seed in range(args.overhead_episodes):
                timer.calls.clear()
                engine.spans.clear()
                await play_episode(
                    http,
                    model,
                    Task(ENV_ID, seed=seed, group_size=1),
                    max_turns=args.overhead_turns,
                    sampling=sampling.model_dump(),
                )
                calls, spans = list(timer.calls), list(engine.spans)
                pull = PullRequest(trainer_version=0, max_staleness=0, num_groups=1, timeout_s=5)
                answer = await http.post(
                    "/admin/buffer/pull", json=pull.model_dump(), headers=admin
                )
                [group] = PullResponse.model_validate(answer.json()).groups
                await http.post(
                    "/admin/buffer/ack", json={"group_ids": [group.group_id]}, headers=admin
                )
                sessions += session_turns(calls, spans, group.trajectories[0])

                engine.spans.clear()
                spec = EpisodeSpec(
                    ENV_ID, {}, seed, uuid.uuid4().hex, sampling, max_turns=args.overhead_turns
                )
                trajectory = await runner.run(spec)
                runs += runner_turns(list(engine.spans), trajectory)
    return sessions, runs


def overhead_rows(args: argparse.Namespace, model_dir: Path) -> list[Row]:
    sessions, runs = asyncio.run(overhead(args, model_dir))
    session, runner = statistics.median(sessions), statistics.median(runs)
    return [
        (
            "server's own time per turn: session vs runner",
            f"session {session * 1e3:.2f} ms (p90 {percentile(sessions, 0.9) * 1e3:.2f})",
            f"runner {runner * 1e3:.2f} ms (p90 {percentile(runs, 0.9) * 1e3:.2f})",
            f"+{(session - runner) * 1e3:.2f} ms",
            f"<= +2 ms; {len(sessions)} and {len(runs)} turns, median",
        )
    ]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def main(args: argparse.Namespace) -> None:
    model_dir = Path(args.model_dir)
    rows = load_rows(args, model_dir)
    rows += overhead_rows(args, model_dir)
    print_table(rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=64)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--episodes", type=int, default=2, help="episodes per agent")
    parser.add_argument("--turns", type=int, default=4, help="model turns per episode")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--overhead-episodes", type=int, default=16)
    parser.add_argument("--overhead-turns", type=int, default=6)
    parser.add_argument("--model-dir", default=str(default_model_dir()))
    main(parser.parse_args())
