"""External-agent sessions: an agent (any language) acts over HTTP; its episode becomes data.

The agent creates a session on an env id and gets the opening messages; it calls the
OpenAI routes with the session id (header ``X-Rollgym-Session`` or body ``session_id``),
steps the env with its action, and closes the session, which hands the episode
(``source="session"``) to its group (``server.sessions.groups``): G sessions on one task
are persisted as one GRPO group once all have closed, a lone session as a group of one.
Each group takes one group of the staleness window's budget, shared with the rollout
runner (``SharedWindow``), from its first session until it settles: a session that would
open a group while the window is full is refused (``WindowFull``, 429 with
``Retry-After``); joining an admitted group never is.

The session owns the conversation, token-faithfully: an LLM call's ``messages`` must
start with the session's conversation so far (same roles and contents, the model's own
answers as it returned them); what the agent added after it (its own notes, tool
results) and the env's observations are appended once by template diffing (mask 0), and
the sampled ids as they are (mask 1). Messages that diverge get ``TranscriptMismatch``.
A step acts on the model's last answer as it wrote it (``ModelAnswer.written``: up to a
stop text, tool-call blocks included), sent back as the action or asked for with
``model_answer`` (a framework that only sees the parsed ``tool_calls`` cannot rebuild the
text); when the env answers each of the answer's tool calls with one tool message, the
step names the call each message answers (``tool_call_ids``), so the framework can hand
them back as its tool results. An action that is not the model's last answer (no LLM call
before it, or a different text) is the agent's own: it enters the context as environment
tokens, and the reward its step earns is not credited to the model (``server.conversation.recording``).

Sessions fit how agent frameworks call: a retried LLM call (OpenAI's clients retry twice
by default) gets the turn already recorded for it, never a second model turn; a call with
``tools`` shows the model the env's tools as the env declared them, whatever the client
made of them (pydantic-ai's ``"strict": true`` rewrites their schemas), so the episode
trains on the prompt the env's own rollouts use.

Agents reach only the envs and kwargs ``env_access`` opens to them (``server.access.env_access``);
the kwargs are recorded on the trajectory. Request data is tokenized off the event loop,
but for a turn's few new characters (``INLINE_CHARS``): a thread hop costs more than that.
A session whose context reaches ``max_model_len`` is over (``ContextFull``, 409): its
episode is marked ``truncated_by_context``.

Sessions idle for ``idle_timeout_s`` expire: their env is closed (releasing its sandbox)
and the unfinished episode is kept aside as invalid. Groups not settled ``group_timeout_s``
after their first session opened are settled with what they have (their open sessions
closed as invalid).

A step on which the env raised, returned a non-finite reward or reported an infrastructure
fault ends the episode as invalid (``server.conversation.recording``) and answers ``EnvFailure`` (409)
naming the env's error; closing the session then keeps the episode aside.

Each session belongs to the agent key that opened it (``server.access.agent_keys``): it holds a
slot of that key's quota (and a sandbox slot, taken before the reset that takes the box)
until it closes or expires, only that key can use it (another key gets 404, as for a
session that does not exist), and its trajectory records the key's name. So does its
group's name: another key naming the same ``group_id`` or task opens a group of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
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
    ToolCallResult,
)
from rollgym.engine.base import Generation, OutputConstraint, PolicyEngine
from rollgym.envs import aio
from rollgym.server.access.agent_keys import SessionLease
from rollgym.server.access.env_access import EnvAccessConfig, check_request
from rollgym.server.buffer.store import TrajectoryBuffer
from rollgym.server.config import SessionConfig
from rollgym.server.conversation.codec import ChatCodec, TemplateMessage
from rollgym.server.conversation.recording import (
    EpisodeKey,
    EpisodeRecorder,
    messages_of,
    step_env,
)
from rollgym.server.errors import (
    BadRequest,
    Conflict,
    ContextFull,
    EnvFailure,
    NotFound,
    QuotaExceeded,
    ServerError,
    TranscriptMismatch,
    WindowFull,
)
from rollgym.server.observability.metrics import ServerMetrics
from rollgym.server.rollout.admission import AdmissionGate, SharedWindow
from rollgym.server.rollout.environments import EnvFactory, amake, holds_sandbox
from rollgym.server.rollout.episode import env_tools, opening_budget
from rollgym.server.sessions.groups import GroupBook, SessionGroup, Settlement

logger = logging.getLogger(__name__)
Clock = Callable[[], float]
# A turn whose new messages from the request hold at most this many characters is tokenized
# on the event loop (well under a millisecond, like the env's replies the runner tokenizes
# there); more, and the first prompt (the request's tools too), go to a worker thread.
INLINE_CHARS = 4096


class TooManySessions(ServerError):
    status = 429
    code = ErrorCode.TOO_MANY_SESSIONS


@dataclasses.dataclass(frozen=True)
class ModelAnswer:
    """The model's answer to one LLM call of a session, as its agent got it.

    ``written``: the text as the model wrote it (up to a stop text, tool-call blocks
    included), the action that earns the model credit; ``content``: the message's content
    as shown (tool calls parsed out), which the agent's next call repeats;
    ``tool_call_ids``: the ids of the tool calls parsed out of it, in order.
    """

    written: str
    content: str
    tool_call_ids: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class _Call:
    """An LLM call as it was asked (messages, tools, stop texts) and what it generated."""

    asked: tuple[list[TemplateMessage], list[dict[str, Any]] | None, tuple[str, ...]]
    generation: Generation


@dataclasses.dataclass
class _Session:
    id: str
    request: SessionCreate
    group: SessionGroup
    env: Any
    record: EpisodeRecorder
    conversation: list[TemplateMessage]  # what the agent has seen, in order
    lease: SessionLease  # its agent's quota slots, released on close
    pending: list[TemplateMessage] = dataclasses.field(default_factory=list)  # not yet in tokens
    last_stopped: bool = True
    answer: ModelAnswer | None = None  # the model's last answer, until a step follows it
    last_call: _Call | None = None  # the LLM call that answer answered
    tool_results: dict[str, ToolCallResult] = dataclasses.field(default_factory=dict)
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
        window: SharedWindow | None = None,
        clock: Clock = time.monotonic,
    ):
        """``window``: the budget shared with the rollout runner (default: the sessions' own,
        ``SessionConfig.max_staleness`` and ``groups_per_batch``)."""
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
        self._groups = GroupBook(config.group_timeout_s)
        self._window = window or SharedWindow(
            AdmissionGate(config.max_staleness, config.groups_per_batch),
            buffered=lambda: buffer.depth.total,
        )
        self._window.count(lambda: len(self._groups))

    def __len__(self) -> int:
        return len(self._sessions)

    async def create(self, request: SessionCreate, lease: SessionLease) -> SessionCreated:
        """Open a session in its group under ``lease`` (the caller releases it if this raises)."""
        if len(self._sessions) >= self._config.max_sessions:
            raise TooManySessions(f"{len(self._sessions)} sessions are open; close some first")
        check_request(self._access, request.env_id, request.env_kwargs, lane="agent")
        if (request.group_size or 1) > self._config.max_sessions:
            raise BadRequest(
                f"group_size {request.group_size} is over the {self._config.max_sessions} "
                "sessions the server holds at once (sessions.max_sessions): it could never fill"
            )
        agent = lease.agent.name
        if self._groups.opens_group(request, agent) and self._window.room() <= 0:
            gate = self._window.gate
            raise WindowFull(
                f"the staleness window is full ({gate.capacity} groups in flight or buffered, "
                "rollouts and sessions together): retry once the trainer has pulled",
                retry_after_s=self._config.retry_after_s,
            )
        session_id = uuid.uuid4().hex
        group = self._groups.join(request, agent, session_id, self._clock())
        try:
            return await self._start(request, session_id, group, lease)
        except BaseException:
            self._groups.leave(session_id)
            raise

    async def _start(
        self, request: SessionCreate, session_id: str, group: SessionGroup, lease: SessionLease
    ) -> SessionCreated:
        env = await amake(self._envs, request.env_id, request.env_kwargs, max_turns=None)
        try:
            if holds_sandbox(env):
                lease.hold_sandbox()  # refused at once, never left waiting for a box
            observation, info = await aio.areset(env, seed=group.seed)
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
        key = EpisodeKey(
            group.id,
            request.env_id,
            group.seed,
            "session",
            env_kwargs=dict(request.env_kwargs),
            agent=lease.agent.name,
        )
        session = _Session(session_id, request, group, env, EpisodeRecorder(key), opening, lease)
        session.record.said(opening)
        session.last_used = self._clock()
        self._sessions[session.id] = session
        self._metrics.sessions.set(len(self._sessions))
        warnings = []
        if budget.verdict != "fits":
            warnings.append(f"the episode may be cut by the context: {budget.explain()}")
        return SessionCreated(
            session_id=session.id,
            group_id=group.id,
            group_size=group.size,
            seed=group.seed,
            observation=session.conversation,
            tools=env_tools(env),
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
        answer: Callable[[Generation], ModelAnswer] | None = None,
        constraint: OutputConstraint | None = None,
    ) -> Generation:
        """An LLM call of the session's agent, recorded as the session's next model turn.

        ``answer`` is what the agent gets of the generation (default: the decoded tokens,
        written and shown alike; the OpenAI route cuts stop texts and parses tool calls);
        ``constraint`` limits what is sampled (the sampled ids are recorded all the same).
        A call with ``tools`` renders the env's own tools into the prompt (when it has any).
        A retry (the same messages, tools and stop texts as the call the last answer answered,
        no step since) gets that answer's generation again: nothing is generated or recorded.
        """
        session = self._get(session_id, agent)
        async with session.lock:
            self._check_open(session)
            asked = (list(messages), tools, tuple(stop))
            last = session.last_call
            if session.answer is not None and last is not None and last.asked == asked:
                # a retry (OpenAI clients retry twice by default): the turn it asked for again
                session.answer = (answer or self._decoded)(last.generation)
                session.last_used = self._clock()
                return last.generation
            if tools:  # the env's tools as it declared them, whatever the client added
                tools = env_tools(session.env) or tools
            added = _extension(session.conversation, messages)
            if session.record.transcript is not None and _chars(added) <= INLINE_CHARS:
                context = self._context(session, added, tools)  # a usual turn: no thread hop
            else:
                context = await asyncio.to_thread(self._context, session, added, tools)
            if len(context) >= self._max_model_len:
                session.record.context_full()
                raise ContextFull(
                    f"the session's context has {len(context)} tokens, the model's holds "
                    f"{self._max_model_len}: the episode is over; DELETE the session to keep it"
                )
            generation = await self._engine.generate(
                context,
                sampling,
                stop_token_ids=[self._codec.eos_id],
                stop=stop,
                seed=seed,
                constraint=constraint,
            )
            session.record.model_turn(context, generation)
            session.answer = (answer or self._decoded)(generation)
            session.last_call = _Call(asked, generation)
            session.conversation += [
                *added,
                {"role": "assistant", "content": session.answer.content},
            ]
            session.record.said([*added, {"role": "assistant", "content": session.answer.written}])
            # A stop text ends the turn without the end-of-turn token: the continuation adds it.
            session.last_stopped = generation.token_ids[-1:] == [self._codec.eos_id]
            session.last_used = self._clock()
            return generation

    def _decoded(self, generation: Generation) -> ModelAnswer:
        text = self._codec.decode(generation.token_ids)
        return ModelAnswer(written=text, content=text)

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

    async def step(self, session_id: str, action: str | None, *, agent: str) -> SessionStepResult:
        """Step the env with ``action`` (None: the model's last answer as it wrote it)."""
        session = self._get(session_id, agent)
        async with session.lock:
            return await self._step(session, action)

    async def tool_call(self, session_id: str, call_id: str, *, agent: str) -> ToolCallResult:
        """The result of the last answer's tool call ``call_id``: the first one asked for
        steps the env with the answer (it runs all the answer's calls), each call's id then
        gets the tool message that answers it (or, from an env that answered the answer as
        a whole, its messages as they are)."""
        session = self._get(session_id, agent)
        async with session.lock:
            if call_id in session.tool_results:
                return session.tool_results[call_id]
            if session.answer is None or call_id not in session.answer.tool_call_ids:
                raise NotFound(
                    f"no tool call {call_id!r} in session {session.id}'s last model answer "
                    "(each answer's call ids are good until the next step)"
                )
            ids = session.answer.tool_call_ids
            step = await self._step(session, None)
            session.tool_results = {
                asked: ToolCallResult(
                    call_id=asked,
                    content=content,
                    observation=None if step.tool_call_ids else step.observation,
                    terminated=step.terminated,
                    truncated=step.truncated,
                )
                for asked, content in _contents(ids, step)
            }
            return session.tool_results[call_id]

    async def _step(self, session: _Session, action: str | None) -> SessionStepResult:
        """``step`` under the session's lock."""
        self._check_open(session)
        answer = session.answer
        if action is None:
            if answer is None:
                raise Conflict(
                    f"session {session.id} has no model answer to step with: call the "
                    "chat route with the session first (or send an action)"
                )
            action = answer.written
        step = await step_env(session.env, action, self._metrics)
        models = answer is not None and action.strip() == answer.written.strip()
        if not models:  # the agent's own action, not the model's: no credit, no turn
            session.pending.append({"role": "assistant", "content": action})
            session.conversation.append({"role": "assistant", "content": action})
            session.record.said([{"role": "assistant", "content": action}])
        session.record.env_step(step, answers_model_turn=models)
        session.record.said(step.observation)
        session.pending += step.observation
        session.conversation += step.observation
        session.answer = None
        session.last_used = self._clock()
        if step.infra_error is not None:
            raise EnvFailure(
                f"{session.request.env_id} failed: {step.infra_error}. The episode is over "
                "and invalid (never trained on): DELETE the session"
            )
        return SessionStepResult(
            observation=step.observation,
            reward=step.reward,
            terminated=step.terminated,
            truncated=step.truncated,
            info=_plain(step.info),
            tool_call_ids=_answered_calls(answer, step.observation) if models else None,
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
            except Exception:  # the steps are recorded; the session still ends, its group too
                logger.exception(
                    "session %s: %s failed to close", session.id, session.request.env_id
                )
            finally:
                session.lease.release()
            if reason is not None:
                session.record.fail(reason)
            return await self._persist(session)

    async def _persist(self, session: _Session) -> SessionClosed:
        """Hand the episode to its group; persist the group if this settles it."""
        episode = None
        if session.record.transcript is not None and session.record.turns:
            episode = session.record.trajectory(self._engine.policy_version)
            if episode.truncated_by_context:
                self._metrics.truncated_by_context.labels(source="session").inc()
        settlement = self._groups.finish(session.id, episode)
        if settlement is not None:
            await self._store(settlement)
        return SessionClosed(
            session_id=session.id,
            trajectory_id=episode.id if episode else None,
            persisted=episode is not None and settlement is not None,
            valid=episode is not None and episode.valid,
            group_id=session.group.id,
            group_pending=session.group.pending,
        )

    async def _store(self, settlement: Settlement) -> None:
        """Persist a settled group: its kept episodes as one group, the rest aside, counted."""
        for trajectory in settlement.invalid:
            await self._buffer.put_invalid(trajectory)
            self._metrics.invalid.inc()
        for trajectory in settlement.set_aside:
            await self._buffer.put_invalid(trajectory)
            self._metrics.dropped.labels(reason="too_few_valid").inc()
        if settlement.kept is not None:
            await self._buffer.put_group(settlement.kept)
            kept = len(settlement.kept.trajectories)
            self._metrics.trajectories.labels(source="session").inc(kept)
        if settlement.group.size > 1:
            self._metrics.session_groups.labels(outcome=settlement.outcome).inc()

    async def expire_groups(self) -> int:
        """Settle groups past ``group_timeout_s`` (their open sessions closed as invalid)."""
        overdue = self._groups.overdue(self._clock())
        for group in overdue:
            for session_id in list(group.open):
                with contextlib.suppress(NotFound):
                    await self.close(session_id, reason="its group timed out (group_timeout_s)")
            if (settlement := self._groups.settle_expired(group)) is not None:
                await self._store(settlement)
        return len(overdue)

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
            await self.expire_groups()

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


def _chars(messages: Sequence[TemplateMessage]) -> int:
    return sum(len(m["content"]) for m in messages)


def _answered_calls(
    answer: ModelAnswer | None, observation: Sequence[TemplateMessage]
) -> list[str] | None:
    """The ids of the answer's tool calls when ``observation`` is one tool message per call
    (the call each message answers, in order), else None."""
    ids = list(answer.tool_call_ids) if answer is not None else []
    if ids and len(observation) == len(ids) and all(m["role"] == "tool" for m in observation):
        return ids
    return None


def _contents(ids: Sequence[str], step: SessionStepResult) -> list[tuple[str, str | None]]:
    """Each call id with the tool message's content answering it (None for every id when
    the env did not answer call by call)."""
    if step.tool_call_ids is None:
        return [(call_id, None) for call_id in ids]
    return [(i, m.content) for i, m in zip(step.tool_call_ids, step.observation, strict=True)]


def _plain(info: dict[str, Any]) -> dict[str, object]:
    """The JSON-friendly part of an info dict."""
    return {k: v for k, v in info.items() if isinstance(v, (str, int, float, bool, type(None)))}
