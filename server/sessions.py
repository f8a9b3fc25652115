"""External-agent sessions: an agent (any language) acts over HTTP; its episode becomes data.

The agent creates a session on an env id and gets the opening messages; it calls the
OpenAI routes with the session id (header ``X-Rollgym-Session`` or body ``session_id``),
steps the env with its action, and closes the session, which persists the episode as a
trajectory (a group of one, ``source="session"``).

The session owns the conversation, token-faithfully: an LLM call's ``messages`` must
start with the session's conversation so far (same roles and contents, the model's own
answers as it returned them); what the agent added after it (its own notes, tool
results) and the env's observations are appended once by template diffing (mask 0), and
the sampled ids as they are (mask 1). Messages that diverge get ``TranscriptMismatch``.
An action stepped with no LLM call before it is the agent's own text: it enters the
context as an environment token run, never as a model turn.

Sessions idle for ``idle_timeout_s`` expire: their env is closed (releasing its sandbox)
and the unfinished episode is kept aside as invalid.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from rollgym.envs import aio
from rollgym.server.buffer import TrajectoryBuffer
from rollgym.server.chat import ChatCodec, Message
from rollgym.server.config import SessionConfig
from rollgym.server.errors import Conflict, NotFound, ServerError, TranscriptMismatch
from rollgym.server.metrics import ServerMetrics
from rollgym.server.policy import Generation, PolicyEngine
from rollgym.server.rollout.environments import EnvFactory
from rollgym.server.transcript import Transcript
from rollgym.server.wire import (
    SamplingSettings,
    SessionClosed,
    SessionCreate,
    SessionCreated,
    SessionStepResult,
    Trajectory,
    TrajectoryGroup,
    TurnRecord,
)

Clock = Callable[[], float]


class TooManySessions(ServerError):
    status = 429
    code = "too_many_sessions"


@dataclasses.dataclass
class _Session:
    id: str
    request: SessionCreate
    env: Any
    conversation: list[Message]  # what the agent has seen, in order
    pending: list[Message] = dataclasses.field(default_factory=list)  # not yet in tokens
    transcript: Transcript | None = None
    turns: list[TurnRecord] = dataclasses.field(default_factory=list)
    last_stopped: bool = True
    model_turn_open: bool = False  # an LLM answer not yet followed by a step
    reward: float = 0.0
    done: bool = False
    terminated: bool = False
    truncated: bool = False
    invalid_reason: str | None = None
    last_used: float = 0.0
    lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)


class SessionManager:
    """See the module docstring."""

    def __init__(
        self,
        engine: PolicyEngine,
        codec: ChatCodec,
        envs: EnvFactory,
        buffer: TrajectoryBuffer,
        metrics: ServerMetrics,
        config: SessionConfig,
        *,
        clock: Clock = time.monotonic,
    ):
        self._engine = engine
        self._codec = codec
        self._envs = envs
        self._buffer = buffer
        self._metrics = metrics
        self._config = config
        self._clock = clock
        self._sessions: dict[str, _Session] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    async def create(self, request: SessionCreate) -> SessionCreated:
        if len(self._sessions) >= self._config.max_sessions:
            raise TooManySessions(f"{len(self._sessions)} sessions are open; close some first")
        env = self._envs.make(request.env_id, request.env_kwargs, max_turns=None)
        try:
            observation, info = await aio.areset(env, seed=request.seed)
        except Exception as exc:
            await asyncio.to_thread(env.close)
            raise Conflict(f"{request.env_id} failed to reset: {exc!r}") from exc
        session = _Session(uuid.uuid4().hex, request, env, _messages(observation))
        session.last_used = self._clock()
        self._sessions[session.id] = session
        self._metrics.sessions.set(len(self._sessions))
        return SessionCreated(
            session_id=session.id,
            observation=session.conversation,
            info=_plain(info),
            policy_version=self._engine.policy_version,
        )

    async def generate(
        self,
        session_id: str,
        messages: Sequence[Message],
        sampling: SamplingSettings,
        *,
        tools: list[dict[str, Any]] | None = None,
    ) -> Generation:
        """An LLM call of the session's agent, recorded as the session's next model turn."""
        session = self._get(session_id)
        async with session.lock:
            self._check_open(session)
            added = _extension(session.conversation, messages)
            context = self._context(session, added, tools)
            generation = await self._engine.generate(
                context, sampling, stop_token_ids=[self._codec.eos_id]
            )
            assert session.transcript is not None
            session.transcript.add_model(generation.token_ids, generation.logprobs)
            answer = {"role": "assistant", "content": self._codec.decode(generation.token_ids)}
            session.conversation += [*added, answer]
            session.last_stopped = generation.finish_reason == "stop"
            session.model_turn_open = True
            session.turns.append(_model_turn(len(session.turns), context, generation))
            session.last_used = self._clock()
            return generation

    def _context(
        self, session: _Session, added: list[Message], tools: list[dict[str, Any]] | None
    ) -> list[int]:
        if session.transcript is None:  # the conversation so far includes anything pending
            session.transcript = Transcript(
                self._codec.first_prompt([*session.conversation, *added], tools=tools)
            )
        else:
            new = [*session.pending, *added]
            if new:
                ids = self._codec.continuation(new, stopped=session.last_stopped)
                session.transcript.add_env(ids)
                if session.turns:
                    last = session.turns[-1]
                    session.turns[-1] = last.model_copy(
                        update={"env_tokens": last.env_tokens + len(ids)}
                    )
        session.pending = []
        return session.transcript.context()

    async def step(self, session_id: str, action: str) -> SessionStepResult:
        session = self._get(session_id)
        async with session.lock:
            self._check_open(session)
            started = time.perf_counter()
            observation, reward, terminated, truncated, info = await aio.astep(session.env, action)
            env_s = float(info.get("env_s", time.perf_counter() - started))
            new = _messages(observation)
            if not session.model_turn_open:  # the agent's own action, not a model turn
                session.pending.append({"role": "assistant", "content": action})
                session.conversation.append({"role": "assistant", "content": action})
            elif session.turns:
                last = session.turns[-1]
                session.turns[-1] = last.model_copy(
                    update={
                        "reward": float(reward),
                        "env_s": env_s,
                        "sandbox_s": float(info.get("sandbox_s", 0.0)),
                    }
                )
            self._metrics.env_step.observe(env_s)
            session.pending += new
            session.conversation += new
            session.model_turn_open = False
            session.reward += float(reward)
            session.terminated, session.truncated = bool(terminated), bool(truncated)
            session.done = session.terminated or session.truncated
            if info.get("failure") == "infra":
                session.invalid_reason = f"infrastructure failure: {info.get('error')}"
            session.last_used = self._clock()
            return SessionStepResult(
                observation=new,
                reward=float(reward),
                terminated=session.terminated,
                truncated=session.truncated,
                info=_plain(info),
            )

    async def close(self, session_id: str, *, reason: str | None = None) -> SessionClosed:
        """End the session; persist its episode (kept aside as invalid with ``reason``)."""
        session = self._sessions.pop(session_id, None)
        if session is None:
            raise NotFound(f"no session {session_id!r} (closed, expired or never made)")
        self._metrics.sessions.set(len(self._sessions))
        async with session.lock:
            await asyncio.to_thread(session.env.close)
            if reason is not None and session.invalid_reason is None:
                session.invalid_reason = reason
            return await self._persist(session)

    async def _persist(self, session: _Session) -> SessionClosed:
        if session.transcript is None or not session.turns:
            return SessionClosed(
                session_id=session.id, trajectory_id=None, persisted=False, valid=False
            )
        trajectory = _trajectory(session)
        if trajectory.valid:
            group = TrajectoryGroup(
                group_id=session.id,
                env_id=session.request.env_id,
                task_seed=session.request.seed,
                trajectories=[trajectory],
            )
            await self._buffer.put_group(group)
            self._metrics.trajectories.labels(source="session").inc()
        else:
            await self._buffer.put_invalid(trajectory)
            self._metrics.invalid.inc()
        return SessionClosed(
            session_id=session.id,
            trajectory_id=trajectory.id,
            persisted=True,
            valid=trajectory.valid,
        )

    async def expire_idle(self) -> int:
        """Close sessions idle longer than the timeout; return how many."""
        cutoff = self._clock() - self._config.idle_timeout_s
        idle = [
            s.id for s in self._sessions.values() if s.last_used < cutoff and not s.lock.locked()
        ]
        for session_id in idle:
            with contextlib.suppress(NotFound):
                await self.close(session_id, reason="session expired (idle)")
        return len(idle)

    async def run_sweeper(self) -> None:
        while True:
            await asyncio.sleep(self._config.sweep_interval_s)
            await self.expire_idle()

    async def close_all(self) -> None:
        for session_id in list(self._sessions):
            with contextlib.suppress(NotFound):
                await self.close(session_id, reason="server shut down")

    def _get(self, session_id: str) -> _Session:
        session = self._sessions.get(session_id)
        if session is None:
            raise NotFound(f"no session {session_id!r} (closed, expired or never made)")
        return session

    @staticmethod
    def _check_open(session: _Session) -> None:
        if session.done:
            raise Conflict(f"session {session.id}'s episode is over; DELETE it to persist it")


def _extension(known: list[Message], messages: Sequence[Message]) -> list[Message]:
    """The messages after ``known``; ``TranscriptMismatch`` if ``messages`` diverge from it."""
    if len(messages) < len(known):
        raise TranscriptMismatch(
            f"the request has {len(messages)} messages; the session's conversation has "
            f"{len(known)}: send the whole conversation, the session's messages first"
        )
    for index, (ours, theirs) in enumerate(zip(known, messages, strict=False)):
        if ours["role"] != theirs.get("role") or ours["content"] != theirs.get("content"):
            raise TranscriptMismatch(
                f"message {index} differs from the session's conversation (expected role "
                f"{ours['role']!r} with content {ours['content'][:80]!r})"
            )
    return [{"role": m["role"], "content": m.get("content") or ""} for m in messages[len(known) :]]


def _messages(observation: Any) -> list[Message]:
    return [{"role": str(m["role"]), "content": str(m["content"])} for m in observation]


def _plain(info: dict[str, Any]) -> dict[str, object]:
    """The JSON-friendly part of an info dict."""
    return {k: v for k, v in info.items() if isinstance(v, (str, int, float, bool, type(None)))}


def _model_turn(index: int, context: list[int], generation: Generation) -> TurnRecord:
    return TurnRecord(
        index=index,
        policy_version=generation.policy_version,
        context_tokens=len(context),
        completion_tokens=len(generation.token_ids),
        env_tokens=0,
        cached_tokens=generation.cached_tokens,
        finish_reason=generation.finish_reason,
        model_s=generation.model_s,
        queue_s=generation.queue_s,
    )


def _trajectory(session: _Session) -> Trajectory:
    transcript = session.transcript
    assert transcript is not None
    versions = [t.policy_version for t in session.turns]
    return Trajectory(
        id=uuid.uuid4().hex,
        group_id=session.id,
        env_id=session.request.env_id,
        task_seed=session.request.seed,
        source="session",
        prompt_ids=transcript.prompt_ids,
        completion_ids=transcript.completion_ids,
        logprobs=transcript.logprobs,
        loss_mask=transcript.loss_mask,
        reward=session.reward,
        terminated=session.terminated,
        truncated=session.truncated or not session.done,
        valid=session.invalid_reason is None,
        invalid_reason=session.invalid_reason,
        min_version=min(versions),
        max_version=max(versions),
        turns=session.turns,
        created_at=time.time(),
    )
