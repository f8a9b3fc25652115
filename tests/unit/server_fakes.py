"""Fakes and helpers for the server's unit tests (real twins: tests/engine and tests/e2e).

* ``ScriptedEnv``: a chat env whose rewards, turn count, latency and failures are set by
  the test; ``ScriptedEnvs`` makes it (and the real GuessNumber) by id.
* ``scripted_sessions``: a ``SessionManager`` on a fake engine that answers ``answers`` in
  turn, agents allowed the scripted env.
* ``guessing_script``: a ``FakeEngine`` script that answers with a number drawn from a
  seeded RNG, then the end-of-turn token, so GuessNumber groups have reward variance.
* ``settings``: the server's settings with the admin token and one agent key
  (``AGENT_NAME``, ``AGENT_KEY``).
* ``sandboxed_app``: the app on a fake engine with one fake box (a host process), for the
  sandboxed envs (ToolUse) through HTTP.
* ``in_process``: an app's lifespan plus an httpx client over ``ASGITransport`` that sends
  the agent key on the ``/v1/`` routes, as an agent does (``AgentAuth``).
* ``safetensors_bytes``: a checkpoint that fits ``FAKE_MANIFEST`` (or does not).
* ``wait_for``: poll observable state, as a client would, until a predicate holds.

This module holds no tests; the test modules import it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium
import httpx
import torch
from fastapi import FastAPI
from safetensors.torch import save

from rollgym.engine.fake import FakeEngine
from rollgym.envs.spaces import ChatText, Messages
from rollgym.server.access.agent_keys import (
    Agent,
    AgentKeysConfig,
    AgentQuota,
    QuotaLedger,
    SessionLease,
)
from rollgym.server.access.env_access import EnvAccessConfig
from rollgym.server.buffer.store import TrajectoryBuffer
from rollgym.server.config import ServerSettings, SessionConfig
from rollgym.server.conversation.codec import ChatCodec
from rollgym.server.errors import NotFound
from rollgym.server.observability.metrics import ServerMetrics
from rollgym.server.rollout.environments import RegistryEnvs
from rollgym.server.sessions.manager import SessionManager

ADMIN_TOKEN = "unit-test-admin-token"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
AGENT_NAME = "unit-test-agent"
AGENT_KEY = "unit-test-agent-key"
SCRIPTED = "test/Scripted-v0"


class ScriptedEnv(gymnasium.Env[Any, str]):
    """Asks for an answer ``turns`` times; pays ``reward_of(seed, action)`` each step.

    ``fail_on`` makes that step (1-based) report an infrastructure failure, ``crash_on``
    makes it raise (an env bug), ``close_fails`` makes ``close`` raise; ``latency_s``
    makes each step take that long; its ``sandbox_s`` attribute claims half of it (the
    channel beside ``info`` that ``ChatEnv`` keeps).
    """

    def __init__(
        self,
        *,
        turns: int = 2,
        reward_of: Callable[[int, str], float] = lambda seed, action: 0.0,
        fail_on: int | None = None,
        crash_on: int | None = None,
        latency_s: float = 0.0,
        reset_fails: bool = False,
        close_fails: bool = False,
    ):
        self.observation_space = Messages()
        self.action_space = ChatText()
        self._turns, self._reward_of, self._fail_on = turns, reward_of, fail_on
        self._crash_on = crash_on
        self._latency_s, self._reset_fails = latency_s, reset_fails
        self._close_fails = close_fails
        self.actions: list[str] = []
        self.closed = False
        self.sandbox_s = 0.0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        if self._reset_fails:
            raise RuntimeError("the box would not start")
        self._seed, self._step = seed or 0, 0
        opening = (
            {"role": "system", "content": "Answer with a number."},
            {"role": "user", "content": f"Task {self._seed}."},
        )
        return opening, {}

    def step(self, action: str) -> Any:
        started = time.perf_counter()
        if self._latency_s:
            time.sleep(self._latency_s)
        self._step += 1
        self.actions.append(action)
        self.sandbox_s = (time.perf_counter() - started) / 2  # read beside info, like ChatEnv's
        info: dict[str, Any] = {"failure": None}
        if self._step == self._crash_on:
            raise RuntimeError("the user's env has a bug")
        if self._step == self._fail_on:
            info.update(failure="infra", error="the box died")
            return (), 0.0, False, True, info
        reward = self._reward_of(self._seed, action)
        done = self._step >= self._turns
        feedback = ({"role": "user", "content": f"Step {self._step} done."},)
        return feedback, reward, done, False, info

    def close(self) -> None:
        self.closed = True
        if self._close_fails:
            raise RuntimeError("the box would not stop")


class ScriptedEnvs:
    """An ``EnvFactory``: ``SCRIPTED`` makes a ``ScriptedEnv``; other ids go to the registry."""

    def __init__(self, **env_options: Any):
        self.env_options = env_options
        self.made: list[ScriptedEnv] = []
        self._registry = RegistryEnvs(lambda: None)

    def make(
        self, env_id: str, env_kwargs: Mapping[str, object], *, max_turns: int | None
    ) -> gymnasium.Env[Any, Any]:
        if env_id != SCRIPTED:
            return self._registry.make(env_id, env_kwargs, max_turns=max_turns)
        if env_kwargs:
            raise NotFound("the scripted env takes no kwargs")
        env = ScriptedEnv(**self.env_options)
        self.made.append(env)
        return env


def scripted_sessions(
    codec: ChatCodec,
    envs: ScriptedEnvs,
    buffer: TrajectoryBuffer,
    *,
    answers: Sequence[str] = ("",),
    config: SessionConfig | None = None,
    metrics: ServerMetrics | None = None,
    **options: Any,
) -> SessionManager:
    """Sessions on ``envs`` whose model answers ``answers`` in turn (each then ends its turn)."""
    replies = itertools.cycle(answers)
    return SessionManager(
        FakeEngine(lambda prompt: [*codec.encode(next(replies)), codec.eos_id]),
        codec,
        envs,
        buffer,
        metrics or ServerMetrics(),
        config or SessionConfig(),
        access=EnvAccessConfig(agent_env_ids=(SCRIPTED,)),
        max_model_len=512,
        default_max_tokens=8,
        **options,
    )


def guessing_script(codec: ChatCodec, seed: int = 0) -> Callable[[Sequence[int]], list[int]]:
    """Answer each prompt with a random number from 1 to 16, then end the turn."""
    rng = random.Random(seed)
    return lambda prompt: [*codec.encode(str(rng.randint(1, 16))), codec.eos_id]


def settings(tmp_path: Path, **overrides: Any) -> ServerSettings:
    overrides.setdefault("agents", AgentKeysConfig(keys={AGENT_NAME: AGENT_KEY}))
    return ServerSettings(admin_token=ADMIN_TOKEN, data_dir=tmp_path / "data", **overrides)


def sandboxed_app(tmp_path: Path, engine: FakeEngine) -> FastAPI:
    """The app on ``engine`` with a pool of one ``FakeSandboxPool`` box."""
    from rollgym.sandboxes.config import PoolConfig
    from rollgym.sandboxes.fake import FakeSandboxPool
    from rollgym.server.app import create_app
    from rollgym.server.config import SandboxSettings

    return create_app(
        settings(tmp_path, sandboxes=SandboxSettings(pool_size=1)),
        engine_factory=engine_factory(engine),
        pool_factory=lambda config, sink: FakeSandboxPool(
            PoolConfig(size=1, health_interval_s=0), metrics=sink
        ),
    )


class AgentAuth(httpx.Auth):
    """Sends ``key`` on the ``/v1/`` routes unless the request has its own Authorization."""

    def __init__(self, key: str):
        self.key = key

    def auth_flow(self, request: httpx.Request) -> Any:
        if request.url.path.startswith("/v1/") and "authorization" not in request.headers:
            request.headers["Authorization"] = f"Bearer {self.key}"
        yield request


@contextlib.asynccontextmanager
async def in_process(
    app: FastAPI, agent_key: str | None = AGENT_KEY
) -> AsyncIterator[httpx.AsyncClient]:
    """Run ``app``'s lifespan and yield a client that calls it in-process as ``agent_key``
    (None: a client that sends no key)."""
    auth = AgentAuth(agent_key) if agent_key else None
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://server", auth=auth
        ) as client:
            yield client


def agent_lease(name: str = "agent") -> SessionLease:
    """A session slot of agent ``name`` (default quota), for calling a SessionManager directly."""
    return QuotaLedger().open_session(Agent(name, AgentQuota()))


def engine_factory(engine: FakeEngine) -> Callable[[Any], FakeEngine]:
    return lambda config: engine


def safetensors_bytes(
    shape: tuple[int, ...] = (8, 4),
    dtype: torch.dtype = torch.float32,
    name: str = "model.embed_tokens.weight",
) -> bytes:
    return save({name: torch.ones(shape, dtype=dtype)})


async def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll observable state (what a client would do) until ``predicate`` holds."""
    async with asyncio.timeout(timeout):
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.01)
