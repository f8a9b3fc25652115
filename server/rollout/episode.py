"""One episode, token-faithful: the model acts, the environment answers, nothing re-tokenized.

Each turn: the context (first prompt + everything appended) is checked to extend the last
one and sent as token ids; the sampled ids and their logprobs are appended as they are
(mask 1); the action is their decoded text; the environment's new messages are rendered
once by template diffing and appended (mask 0, logprob 0.0). Because each turn's prompt
extends the last, vLLM's prefix cache serves the episode so far from KV.

An infrastructure failure (``reset`` raising, ``info["failure"] == "infra"``, an env that
crashes, messages of the env that the chat template cannot render, an engine that fails)
makes the trajectory invalid: excluded from training and counted, never scored as reward
0. An episode whose next turn cannot fit ``max_model_len`` is cut there and marked
``truncated_by_context``. The record itself is kept by ``server.conversation.recording``, the same way
for sessions.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Mapping
from typing import Any, Protocol

from rollgym.contract.wire import SamplingSettings, Trajectory
from rollgym.engine.base import PolicyEngine
from rollgym.engine.errors import EngineFailure
from rollgym.envs import aio
from rollgym.server.conversation.codec import ChatCodec, ChatInputError
from rollgym.server.conversation.recording import EpisodeKey, EpisodeRecorder, step_env
from rollgym.server.errors import Conflict
from rollgym.server.observability.metrics import ServerMetrics
from rollgym.server.rollout.budget import ContextBudget
from rollgym.server.rollout.environments import EnvFactory, amake


class Task(Protocol):
    """What a rollout job, an evaluation or a generation plays: an env and how to sample."""

    @property
    def env_id(self) -> str: ...
    @property
    def env_kwargs(self) -> Mapping[str, object]: ...
    @property
    def sampling(self) -> SamplingSettings: ...
    @property
    def max_turns(self) -> int | None: ...


@dataclasses.dataclass(frozen=True)
class EpisodeSpec:
    """What to run: one sample of task ``task_seed`` in group ``group_id``."""

    env_id: str
    env_kwargs: dict[str, object]
    task_seed: int | None
    group_id: str
    sampling: SamplingSettings
    max_turns: int | None = None

    @classmethod
    def of(cls, task: Task, seed: int | None) -> EpisodeSpec:
        """An episode of ``task`` on ``seed``, in a group of its own (share the spec to put
        several samples in one group)."""
        return cls(
            env_id=task.env_id,
            env_kwargs=dict(task.env_kwargs),
            task_seed=seed,
            group_id=uuid.uuid4().hex,
            sampling=task.sampling,
            max_turns=task.max_turns,
        )


class EpisodeRunner:
    """Runs episodes with one engine, codec and env factory (see the module docstring)."""

    def __init__(
        self,
        engine: PolicyEngine,
        codec: ChatCodec,
        envs: EnvFactory,
        *,
        max_model_len: int,
        metrics: ServerMetrics | None = None,
    ):
        self._engine = engine
        self._codec = codec
        self._envs = envs
        self._max_model_len = max_model_len
        self._metrics = metrics

    async def run(self, spec: EpisodeSpec) -> Trajectory:
        env = await amake(self._envs, spec.env_id, spec.env_kwargs, max_turns=spec.max_turns)
        try:
            return await self._run(env, spec)
        finally:
            await aio_close(env)

    async def probe(self, spec: EpisodeSpec) -> ContextBudget:
        """Make and reset the env once (bad kwargs, a missing pool or an env that cannot
        reset show now, as 4xx), and measure its opening: the episodes' context budget."""
        env = await amake(self._envs, spec.env_id, spec.env_kwargs, max_turns=spec.max_turns)
        try:
            try:
                observation, _ = await aio.areset(env, seed=spec.task_seed)
            except Exception as exc:
                raise Conflict(f"{spec.env_id} failed to reset: {exc!r}") from exc
            return opening_budget(
                self._codec,
                env,
                list(observation),
                max_tokens=spec.sampling.max_tokens,
                max_model_len=self._max_model_len,
            )
        finally:
            await aio_close(env)

    async def _run(self, env: Any, spec: EpisodeSpec) -> Trajectory:
        key = EpisodeKey(
            spec.group_id, spec.env_id, spec.task_seed, "rollout", env_kwargs=spec.env_kwargs
        )
        record = EpisodeRecorder(key)
        try:
            observation, _ = await aio.areset(env, seed=spec.task_seed)
            tools = env_tools(env)
            prompt = self._codec.first_prompt(list(observation), tools=tools)
        except Exception as exc:  # the env could not start: not the policy's doing
            record.fail(f"reset failed: {exc!r}")
            return record.trajectory(self._engine.policy_version)
        transcript = record.start(prompt, tools=tools)
        record.said(list(observation))
        while not record.done:
            if spec.max_turns is not None and len(record.turns) >= spec.max_turns:
                record.truncated = True
                break
            context = transcript.context()
            if len(context) >= self._max_model_len:
                record.context_full()
                break
            await self._turn(env, spec, record, context)
        return record.trajectory(self._engine.policy_version)

    async def _turn(
        self, env: Any, spec: EpisodeSpec, record: EpisodeRecorder, context: list[int]
    ) -> None:
        try:
            generation = await self._engine.generate(
                context, spec.sampling, stop_token_ids=[self._codec.eos_id]
            )
        except EngineFailure as exc:
            record.fail(f"engine failure: {exc}")
            return
        record.model_turn(context, generation)
        if generation.finish_reason == "abort":
            record.fail("the generation was aborted")
            return
        action = self._codec.decode(generation.token_ids)
        record.said([{"role": "assistant", "content": action}])
        step = await step_env(env, action, self._metrics)
        record.env_step(step)
        record.said(step.observation)
        if not record.done and step.observation:
            stopped = generation.finish_reason == "stop"
            try:
                record.env_reply(self._codec.continuation(step.observation, stopped=stopped))
            except ChatInputError as exc:
                record.fail(f"the env's reply cannot be rendered: {exc}")


def opening_budget(
    codec: ChatCodec, env: Any, opening: list[Any], *, max_tokens: int, max_model_len: int
) -> ContextBudget:
    """The context budget of an env's episodes, from its opening messages: the prompt as it
    renders, and one reply the size of the opening's last message per turn."""
    prompt = len(codec.first_prompt(opening, tools=env_tools(env)))
    reply = len(codec.continuation(opening[-1:], stopped=True)) if opening else 0
    spec = getattr(env, "spec", None)
    return ContextBudget(
        prompt=prompt,
        max_turns=getattr(spec, "max_episode_steps", None) or 1,
        max_tokens=max_tokens,
        env_tokens=reply,
        max_model_len=max_model_len,
    )


def env_tools(env: Any) -> list[dict[str, Any]] | None:
    """The env's tools (``env.tools``, OpenAI function format), or None if it has none."""
    try:
        tools = env.get_wrapper_attr("tools")
    except AttributeError:
        return None
    return list(tools) if tools else None


async def aio_close(env: Any) -> None:
    """Close an env off the loop (a sandboxed env releases its box)."""
    await asyncio.to_thread(env.close)
