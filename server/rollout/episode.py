"""One episode, token-faithful: the model acts, the environment answers, nothing re-tokenized.

Each turn: the context (first prompt + everything appended) is checked to extend the last
one and sent as token ids; the sampled ids and their logprobs are appended as they are
(mask 1); the action is their decoded text; the environment's new messages are rendered
once by template diffing and appended (mask 0, logprob 0.0). Because each turn's prompt
extends the last, vLLM's prefix cache serves the episode so far from KV.

An infrastructure failure (``reset`` raising, ``info["failure"] == "infra"``, an env that
crashes, an engine that fails) makes the trajectory invalid: excluded from training and
counted, never scored as reward 0.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import Callable
from typing import Any

from rollgym.envs import aio
from rollgym.server.chat import ChatCodec
from rollgym.server.errors import EngineFailure
from rollgym.server.policy import Generation, PolicyEngine
from rollgym.server.rollout.environments import EnvFactory
from rollgym.server.transcript import Transcript
from rollgym.server.wire import SamplingSettings, Trajectory, TurnRecord

Clock = Callable[[], float]


@dataclasses.dataclass(frozen=True)
class EpisodeSpec:
    """What to run: one sample of task ``task_seed`` in group ``group_id``."""

    env_id: str
    env_kwargs: dict[str, object]
    task_seed: int | None
    group_id: str
    sampling: SamplingSettings
    max_turns: int | None = None


@dataclasses.dataclass
class _Outcome:
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    invalid_reason: str | None = None


class EpisodeRunner:
    """Runs episodes with one engine, codec and env factory (see the module docstring)."""

    def __init__(
        self,
        engine: PolicyEngine,
        codec: ChatCodec,
        envs: EnvFactory,
        *,
        max_model_len: int,
        clock: Clock = time.perf_counter,
    ):
        self._engine = engine
        self._codec = codec
        self._envs = envs
        self._max_model_len = max_model_len
        self._clock = clock

    async def run(self, spec: EpisodeSpec) -> Trajectory:
        env = self._envs.make(spec.env_id, spec.env_kwargs, max_turns=spec.max_turns)
        try:
            return await self._run(env, spec)
        finally:
            await aio_close(env)

    async def _run(self, env: Any, spec: EpisodeSpec) -> Trajectory:
        try:
            observation, _ = await aio.areset(env, seed=spec.task_seed)
        except Exception as exc:  # the env could not start: not the policy's doing
            outcome = _Outcome(truncated=True, invalid_reason=f"reset failed: {exc!r}")
            return self._trajectory(spec, Transcript([]), [], outcome)
        transcript = Transcript(self._codec.first_prompt(list(observation), tools=_tools(env)))
        turns: list[TurnRecord] = []
        outcome = _Outcome()
        while not (outcome.terminated or outcome.truncated):
            if spec.max_turns is not None and len(turns) >= spec.max_turns:
                outcome.truncated = True
                break
            context = transcript.context()
            if len(context) >= self._max_model_len:
                outcome.truncated = True  # the context is full: the episode is cut
                break
            await self._turn(env, spec, transcript, context, turns, outcome)
        return self._trajectory(spec, transcript, turns, outcome)

    async def _turn(
        self,
        env: Any,
        spec: EpisodeSpec,
        transcript: Transcript,
        context: list[int],
        turns: list[TurnRecord],
        outcome: _Outcome,
    ) -> None:
        try:
            generation = await self._engine.generate(
                context, spec.sampling, stop_token_ids=[self._codec.eos_id]
            )
        except EngineFailure as exc:
            outcome.truncated, outcome.invalid_reason = True, f"engine failure: {exc}"
            return
        transcript.add_model(generation.token_ids, generation.logprobs)
        if generation.finish_reason == "abort":
            outcome.truncated, outcome.invalid_reason = True, "the generation was aborted"
            return
        action = self._codec.decode(generation.token_ids)
        started = self._clock()
        try:
            observation, reward, terminated, truncated, info = await aio.astep(env, action)
        except Exception as exc:  # a crashing env is an infrastructure failure
            observation, reward, terminated, truncated = (), 0.0, False, True
            info = {"failure": "infra", "error": f"step raised {exc!r}"}
        env_s = float(info.get("env_s", self._clock() - started))
        outcome.reward += float(reward)
        outcome.terminated, outcome.truncated = bool(terminated), bool(truncated)
        if info.get("failure") == "infra":
            outcome.truncated = True
            outcome.invalid_reason = f"infrastructure failure: {info.get('error')}"
        env_ids: list[int] = []
        if not (outcome.terminated or outcome.truncated) and observation:
            stopped = generation.finish_reason == "stop"
            env_ids = self._codec.continuation(list(observation), stopped=stopped)
            transcript.add_env(env_ids)
        turns.append(_turn_record(len(turns), context, generation, env_ids, reward, env_s, info))

    def _trajectory(
        self, spec: EpisodeSpec, transcript: Transcript, turns: list[TurnRecord], o: _Outcome
    ) -> Trajectory:
        versions = [t.policy_version for t in turns] or [self._engine.policy_version]
        return Trajectory(
            id=uuid.uuid4().hex,
            group_id=spec.group_id,
            env_id=spec.env_id,
            task_seed=spec.task_seed,
            source="rollout",
            prompt_ids=transcript.prompt_ids,
            completion_ids=transcript.completion_ids,
            logprobs=transcript.logprobs,
            loss_mask=transcript.loss_mask,
            reward=o.reward,
            terminated=o.terminated,
            truncated=o.truncated,
            valid=o.invalid_reason is None,
            invalid_reason=o.invalid_reason,
            min_version=min(versions),
            max_version=max(versions),
            turns=turns,
            created_at=time.time(),
        )


def _turn_record(
    index: int,
    context: list[int],
    generation: Generation,
    env_ids: list[int],
    reward: Any,
    env_s: float,
    info: dict[str, Any],
) -> TurnRecord:
    return TurnRecord(
        index=index,
        policy_version=generation.policy_version,
        context_tokens=len(context),
        completion_tokens=len(generation.token_ids),
        env_tokens=len(env_ids),
        cached_tokens=generation.cached_tokens,
        reward=float(reward),
        finish_reason=generation.finish_reason,
        model_s=generation.model_s,
        queue_s=generation.queue_s,
        env_s=env_s,
        sandbox_s=float(info.get("sandbox_s", 0.0)),
    )


def _tools(env: Any) -> list[dict[str, Any]] | None:
    try:
        tools = env.get_wrapper_attr("tools")
    except AttributeError:
        return None
    return list(tools) if tools else None


async def aio_close(env: Any) -> None:
    """Close an env off the loop (a sandboxed env releases its box)."""
    await asyncio.to_thread(env.close)
