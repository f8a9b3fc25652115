"""Any registered rollgym env served over OpenEnv's HTTP and WebSocket interface.

openenv-core's own server (``HTTPEnvServer``, ``create_fastapi_app``) serves the routes;
rollgym brings the ``Environment`` it serves (``RollgymEnvironment``) and its three models:

- action ``ChatAction``: ``{"message": <the agent's raw text>}``, as rollgym's envs take it
  (tool calls inside, ``<tool_call>{"name", "arguments"}</tool_call>``);
- observation ``ChatObservation``: the messages the env appended (the opening on reset),
  the env's ``tools`` (OpenAI function format), ``task_id``, ``failure``
  (None | "task" | "infra": an infrastructure failure ends the episode and must not be
  trained on), ``error``, the turn and ``sandbox_s`` (the step's seconds in the box);
  ``reward`` and ``done`` (terminated or truncated) as OpenEnv places them;
- state ``ChatState``: ``episode_id``, ``step_count``, ``env_id``, ``task_id``.

Routes (OpenEnv's): ``POST /reset`` {seed, episode_id, task_id}, ``POST /step``,
``GET /state``, ``/schema``, ``/metadata``, ``/health`` and the session socket ``/ws``
(messages ``reset | step | state | close``). Episodes live in WebSocket sessions, one env
each (``max_sessions`` at once), closed, with their box back in the pool, when the client
closes or after ``session_timeout_s`` idle (OpenEnv's reaper). HTTP ``/reset`` and
``/step`` are stateless in OpenEnv (a fresh env per request): ``/reset`` shows an opening,
``/step`` answers that no episode runs there. Sandboxed envs take boxes from the pool
given (``rollgym serve``'s shared pool, or the command's own)::

    rollgym openenv-serve rollgym/Compute-v0 --port 8100 --max-sessions 8
    # then, with openenv-core's own client:
    with GenericEnvClient(base_url="http://127.0.0.1:8100").sync() as env:
        opening = env.reset(seed=3).observation["messages"]
        result = env.step({"message": "<answer>42</answer>"})
"""

from __future__ import annotations

import dataclasses
import functools
import uuid
from collections.abc import Mapping
from typing import Any, Literal, SupportsFloat

import gymnasium
from fastapi import FastAPI
from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import (
    Action,
    ConcurrencyConfig,
    EnvironmentMetadata,
    Observation,
    State,
)
from pydantic import Field

from rollgym.envs import aio
from rollgym.sandboxes.base import SandboxPool

NO_EPISODE = (
    "no episode runs here: OpenEnv's HTTP /step is stateless (a fresh env per request); "
    "play an episode in a session over /ws (openenv-core's EnvClient does)"
)


class ChatAction(Action):
    """One message of the agent, its raw text."""

    message: str = Field(description="the agent's message, tool calls included")


class ChatObservation(Observation):
    """What the env appended this turn (the opening on reset), and how the turn went."""

    messages: list[dict[str, str]] = Field(default_factory=list)
    tools: list[dict[str, Any]] | None = None
    task_id: str | None = None
    failure: Literal["task", "infra"] | None = None
    error: str | None = None
    turn: int = 0
    sandbox_s: float = 0.0


class ChatState(State):
    env_id: str
    task_id: str | None = None


@dataclasses.dataclass(frozen=True)
class EnvSource:
    """How a session's env is made: the id, its kwargs and the pool sandboxed envs use."""

    env_id: str
    env_kwargs: Mapping[str, Any]
    pool: SandboxPool | None = None

    def make(self) -> gymnasium.Env[Any, str]:
        from rollgym.server.rollout.environments import RegistryEnvs

        return RegistryEnvs(lambda: self.pool).make(self.env_id, self.env_kwargs, max_turns=None)


class RollgymEnvironment(Environment[ChatAction, ChatObservation, ChatState]):
    """A rollgym env behind OpenEnv's ``Environment``; see the module docstring."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # each session has an env (and a box) of its own

    def __init__(self, source: EnvSource) -> None:
        super().__init__()
        self._source = source
        self._env = source.make()
        self._episode_id: str | None = None
        self._task_id: str | None = None
        self._turns = 0

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_id: str | None = None,
        **kwargs: Any,
    ) -> ChatObservation:
        return self._opened(self._env.reset(seed=seed, options=_options(task_id)), episode_id)

    async def reset_async(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_id: str | None = None,
        **kwargs: Any,
    ) -> ChatObservation:
        opened = await aio.areset(self._env, seed=seed, options=_options(task_id))
        return self._opened(opened, episode_id)

    def step(
        self, action: ChatAction, timeout_s: float | None = None, **kwargs: Any
    ) -> ChatObservation:
        if self._episode_id is None:
            return ChatObservation(done=True, error=NO_EPISODE)
        return self._stepped(self._env.step(action.message))

    async def step_async(
        self, action: ChatAction, timeout_s: float | None = None, **kwargs: Any
    ) -> ChatObservation:
        if self._episode_id is None:
            return ChatObservation(done=True, error=NO_EPISODE)
        return self._stepped(await aio.astep(self._env, action.message))

    @property
    def state(self) -> ChatState:
        return ChatState(
            episode_id=self._episode_id,
            step_count=self._turns,
            env_id=self._source.env_id,
            task_id=self._task_id,
        )

    def get_metadata(self) -> EnvironmentMetadata:
        doc = (type(self._env.unwrapped).__doc__ or "").strip().splitlines()
        return EnvironmentMetadata(
            name=self._source.env_id,
            description=doc[0] if doc else f"rollgym env {self._source.env_id}",
        )

    def close(self) -> None:
        """Close the env: its box goes back to the pool."""
        self._env.close()

    def _opened(
        self, opened: tuple[Any, dict[str, Any]], episode_id: str | None
    ) -> ChatObservation:
        messages, info = opened
        self._episode_id = episode_id or uuid.uuid4().hex
        self._task_id, self._turns = info.get("task_id"), 0
        return ChatObservation(
            messages=list(messages),
            tools=self._env.get_wrapper_attr("tools"),
            task_id=self._task_id,
            sandbox_s=self._sandbox_s(),
        )

    def _stepped(
        self, result: tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]
    ) -> ChatObservation:
        messages, reward, terminated, truncated, info = result
        self._turns = int(info.get("turn", self._turns + 1))
        return ChatObservation(
            messages=list(messages),
            reward=float(reward),
            done=terminated or truncated,
            task_id=info.get("task_id"),
            failure=info.get("failure"),
            error=info.get("error"),
            turn=self._turns,
            sandbox_s=self._sandbox_s(),
        )

    def _sandbox_s(self) -> float:
        try:
            return float(self._env.get_wrapper_attr("sandbox_s"))
        except AttributeError:  # a plain Gymnasium env adapted to chat: no box
            return 0.0


def _options(task_id: str | None) -> dict[str, Any] | None:
    return {"task_id": task_id} if task_id is not None else None


def openenv_app(
    source: EnvSource, *, max_sessions: int = 8, session_timeout_s: float | None = 300.0
) -> FastAPI:
    """openenv-core's FastAPI app serving ``source``'s env (see the module docstring)."""
    source.make().close()  # an unknown id or refused kwargs fail here, not in a session
    concurrency = ConcurrencyConfig(
        max_concurrent_envs=max_sessions, session_timeout=session_timeout_s
    )
    return create_fastapi_app(
        functools.partial(RollgymEnvironment, source),
        ChatAction,
        ChatObservation,
        concurrency_config=concurrency,
    )
