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
An action that is not the model's last answer (no LLM call before it, or a different
text) is the agent's own: it enters the context as environment tokens, and the reward
its step earns is not credited to the model (``server.recording``).

Agents reach only the envs and kwargs ``env_access`` opens to them (``server.env_access``);
the kwargs are recorded on the trajectory. Request data is tokenized off the event loop.
A session whose context reaches ``max_model_len`` is over (``ContextFull``, 409): its
episode is marked ``truncated_by_context``.

Sessions idle for ``idle_timeout_s`` expire: their env is closed (releasing its sandbox)
and the unfinished episode is kept aside as invalid.

Each session belongs to the agent key that opened it (``server.agent_keys``): it holds a
slot of that key's quota (and a sandbox slot, taken before the reset that takes the box)
until it closes or expires, only that key can use it (another key gets 404, as for a
session that does not exist), and its trajectory records the key's name.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from rollgym.contract.wire import (
    ErrorCode,
    SamplingSettings,
    SessionClosed,
    SessionCreate,
    SessionCreated,
    SessionStepResult,
    TrajectoryGroup,
)
from rollgym.envs import aio
from rollgym.server.agent_keys import SessionLease
from rollgym.server.buffer import TrajectoryBuffer
from rollgym.server.chat import ChatCodec, TemplateMessage
from rollgym.server.config import SessionConfig
from rollgym.server.env_access import EnvAccessConfig, check_request
from rollgym.server.errors import (
    Conflict,
    ContextFull,
    NotFound,
    QuotaExceeded,
    ServerError,
    TranscriptMismatch,
)
from rollgym.server.metrics import ServerMetrics
from rollgym.server.policy import Generation, PolicyEngine
from rollgym.server.recording import EpisodeKey, EpisodeRecorder, messages_of, step_env
from rollgym.server.rollout.environments import EnvFactory, amake, holds_sandbox
from rollgym.server.rollout.episode import opening_budget

Clock = Callable[[], float]


class TooManySessions(ServerError):
    status = 429
    code = ErrorCode.TOO_MANY_SESSIONS


@dataclasses.dataclass
class _Session:
    id: str
    request: SessionCreate
    env: Any
    record: EpisodeRecorder
    conversation: list[TemplateMessage]  # what the agent has seen, in order
    lease: SessionLease  # its agent's quota slots, released on close
    pending: list[TemplateMessage] = dataclasses.field(default_factory=list)  # not yet in tokens
    last_stopped: bool = True
    answer: str | None = None  # the model's last answer, until a step follows it
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
        access: EnvAccessConfig,
        max_model_len: int,
        default_max_tokens: int,
        clock: Clock = time.monotonic,
    ):
        self._engine = engine
        self._codec = codec
        self._envs = envs
        self._buffer = buffer
        self._metrics = metrics
        self._config = config
        self._access = access
        self._max_model_len = max_model_len
        self._default_max_tokens = default_max_tokens
        self._clock = clock
        self._sessions: dict[str, _Session] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    async def create(self, request: SessionCreate, lease: SessionLease) -> SessionCreated:
        """Open a session under ``lease`` (the caller releases it if this raises)."""
        if len(self._sessions) >= self._config.max_sessions:
            raise TooManySessions(f"{len(self._sessions)} sessions are open; close some first")
        check_request(self._access, request.env_id, request.env_kwargs, lane="agent")
        env = await amake(self._envs, request.env_id, request.env_kwargs, max_turns=None)
        try:
            if holds_sandbox(env):
                lease.hold_sandbox()  # refused at once, never left waiting for a box
            observation, info = await aio.areset(env, seed=request.seed)
            opening = messages_of(observation)
            budget = await asyncio.to_thread(
                opening_budget,
                self._codec,
                env,
                opening,
                max_tokens=self._default_max_tokens,
                max_model_len=self._max_model_len,
            )
        except QuotaExceeded:
            await asyncio.to_thread(env.close)
            raise
        except Exception as exc:
            await asyncio.to_thread(env.close)
            raise Conflict(f"{request.env_id} failed to reset: {exc!r}") from exc
        session_id = uuid.uuid4().hex
        key = EpisodeKey(
            session_id,
            request.env_id,
            request.seed,
            "session",
            env_kwargs=dict(request.env_kwargs),
            agent=lease.agent.name,
        )
        session = _Session(session_id, request, env, EpisodeRecorder(key), opening, lease)
        session.last_used = self._clock()
        self._sessions[session.id] = session
        self._metrics.sessions.set(len(self._sessions))
        warnings = []
        if budget.verdict != "fits":
            warnings.append(f"the episode may be cut by the context: {budget.explain()}")
        return SessionCreated(
            session_id=session.id,
            observation=session.conversation,
            info=_plain(info),
            policy_version=self._engine.policy_version,
            warnings=warnings,
        )

    async def generate(
        self,
        session_id: str,
        messages: Sequence[TemplateMessage],
        sampling: SamplingSettings,
        *,
        agent: str,
        tools: list[dict[str, Any]] | None = None,
        stop: Sequence[str] = (),
        seed: int | None = None,
        shown: Callable[[Generation], str] | None = None,
    ) -> Generation:
        """An LLM call of the session's agent, recorded as the session's next model turn.

        ``shown`` is the answer's text as the agent sees it (default: the decoded tokens;
        the OpenAI route cuts stop texts and tool calls out): its next call repeats it.
        """
        session = self._get(session_id, agent)
        async with session.lock:
            self._check_open(session)
            added = _extension(session.conversation, messages)
            context = await asyncio.to_thread(self._context, session, added, tools)
            if len(context) >= self._max_model_len:
                session.record.context_full()
                raise ContextFull(
                    f"the session's context has {len(context)} tokens, the model's holds "
                    f"{self._max_model_len}: the episode is over; DELETE the session to keep it"
                )
            generation = await self._engine.generate(
                context, sampling, stop_token_ids=[self._codec.eos_id], stop=stop, seed=seed
            )
            session.record.model_turn(context, generation)
            session.answer = (shown or self._decoded)(generation)
            session.conversation += [*added, {"role": "assistant", "content": session.answer}]
            # A stop text ends the turn without the end-of-turn token: the continuation adds it.
            session.last_stopped = generation.token_ids[-1:] == [self._codec.eos_id]
            session.last_used = self._clock()
            return generation

    def _decoded(self, generation: Generation) -> str:
        return self._codec.decode(generation.token_ids)

    def _context(
        self, session: _Session, added: list[TemplateMessage], tools: list[dict[str, Any]] | None
    ) -> list[int]:
        record = session.record
        if record.transcript is None:  # the conversation so far includes anything pending
            transcript = record.start(
                self._codec.first_prompt([*session.conversation, *added], tools=tools),
                tools=tools,
            )
        else:
            transcript = record.transcript
            new = [*session.pending, *added]
            if new:
                record.env_reply(self._codec.continuation(new, stopped=session.last_stopped))
        session.pending = []
        return transcript.context()

    async def step(self, session_id: str, action: str, *, agent: str) -> SessionStepResult:
        session = self._get(session_id, agent)
        async with session.lock:
            self._check_open(session)
            step = await step_env(session.env, action, self._metrics)
            models = session.answer is not None and action.strip() == session.answer.strip()
            if not models:  # the agent's own action, not the model's: no credit, no turn
                session.pending.append({"role": "assistant", "content": action})
                session.conversation.append({"role": "assistant", "content": action})
            session.record.env_step(step, answers_model_turn=models)
            session.pending += step.observation
            session.conversation += step.observation
            session.answer = None
            session.last_used = self._clock()
            return SessionStepResult(
                observation=step.observation,
                reward=step.reward,
                terminated=step.terminated,
                truncated=step.truncated,
                info=_plain(step.info),
            )

    async def close(
        self, session_id: str, *, agent: str | None = None, reason: str | None = None
    ) -> SessionClosed:
        """End the session; persist its episode (kept aside as invalid with ``reason``).

        ``agent``: the key that asks (None: the server itself, on expiry or shutdown).
        """
        self._get(session_id, agent)
        session = self._sessions.pop(session_id)
        self._metrics.sessions.set(len(self._sessions))
        async with session.lock:
            try:
                await asyncio.to_thread(session.env.close)
            finally:
                session.lease.release()
            if reason is not None:
                session.record.fail(reason)
            return await self._persist(session)

    async def _persist(self, session: _Session) -> SessionClosed:
        if session.record.transcript is None or not session.record.turns:
            return SessionClosed(
                session_id=session.id, trajectory_id=None, persisted=False, valid=False
            )
        session.record.said(session.conversation)
        trajectory = session.record.trajectory(self._engine.policy_version)
        if trajectory.truncated_by_context:
            self._metrics.truncated_by_context.labels(source="session").inc()
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

    def _get(self, session_id: str, agent: str | None) -> _Session:
        session = self._sessions.get(session_id)
        if session is None or agent not in (None, session.lease.agent.name):
            raise NotFound(f"no session {session_id!r} (closed, expired or never made)")
        return session

    @staticmethod
    def _check_open(session: _Session) -> None:
        if session.record.done:
            raise Conflict(f"session {session.id}'s episode is over; DELETE it to persist it")


def _extension(
    known: list[TemplateMessage], messages: Sequence[TemplateMessage]
) -> list[TemplateMessage]:
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


def _plain(info: dict[str, Any]) -> dict[str, object]:
    """The JSON-friendly part of an info dict."""
    return {k: v for k, v in info.items() if isinstance(v, (str, int, float, bool, type(None)))}
