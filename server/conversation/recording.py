"""One episode's record, kept the same way for rollouts and external-agent sessions.

The rollout runner (``rollout.episode``) and a session (``sessions``) drive an env in the
same rhythm: the model takes a turn, the env steps on its action, the env's reply enters the
context. ``EpisodeRecorder`` is the one place that turns this into a ``Trajectory``:

* ``model_turn``: the sampled ids and logprobs are appended as they are (mask 1), and a
  ``TurnRecord`` opens with the generation's version, tokens and times;
* ``env_step``: the step's reward, its end (terminated/truncated), its times and its failure
  kind go on the open turn and the episode's outcome; an infrastructure failure makes the
  episode invalid (the first reason is kept);
* ``env_reply``: the env's reply, rendered once by the codec, is appended (mask 0) and
  counted on the last turn;
* ``context_full``: the episode is cut because the next turn cannot fit the model's
  context (``truncated_by_context``, counted apart from other truncations).
* ``said``: the conversation as text (opening messages, each action as the env got it, the
  env's replies), kept beside the tokens for export only (``rollgym.data``): training reads
  the token ids, never this text.

Only the model's own actions earn it credit: a step on an action the model did not make
(an external agent's own text) is recorded, but its reward is not part of the return. A
non-finite logprob (an engine fault) makes the episode invalid, like a non-finite reward:
nothing non-finite is ever stored.

``step_env`` steps an env the one way both use: timed here (the env's ``info`` carries no
wall-clock time; the sandbox's share is read beside it, ``get_wrapper_attr("sandbox_s")``),
with an exception of the env or a non-finite reward turned into an infrastructure failure,
and both times observed in the server's metrics.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import time
import uuid
from collections.abc import Sequence
from typing import Any, Literal

import gymnasium

from rollgym.contract.wire import EnvMessage, Trajectory, TurnRecord
from rollgym.engine.base import Generation
from rollgym.envs import aio
from rollgym.server.conversation.transcript import Transcript
from rollgym.server.observability.metrics import ServerMetrics


@dataclasses.dataclass(frozen=True)
class EnvStep:
    """One ``env.step`` as the server saw it: the 5-tuple, and the time it took."""

    observation: list[dict[str, str]]
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    env_s: float
    sandbox_s: float

    @property
    def infra_error(self) -> str | None:
        """Why the step was an infrastructure failure, or None if it was not one."""
        if self.info.get("failure") != "infra":
            return None
        return str(self.info.get("error") or "the env reported an infrastructure failure")


async def step_env(
    env: gymnasium.Env[Any, Any], action: str, metrics: ServerMetrics | None = None
) -> EnvStep:
    """Step ``env`` off the event loop; see the module docstring."""
    started = time.perf_counter()
    try:
        observation, reward, terminated, truncated, info = await aio.astep(env, action)
        reward = float(reward)
    except Exception as exc:  # a crashing env is an infrastructure failure, never reward 0
        observation, reward, terminated, truncated = (), 0.0, False, True
        info = {"failure": "infra", "error": f"step raised {exc!r}"}
    env_s = time.perf_counter() - started
    if not math.isfinite(reward):
        info = {**info, "failure": "infra", "error": f"the env returned reward {reward}"}
        reward, truncated = 0.0, True
    step = EnvStep(
        observation=messages_of(observation),
        reward=reward,
        terminated=bool(terminated),
        truncated=bool(truncated),
        info=dict(info),
        env_s=env_s,
        sandbox_s=sandbox_seconds(env),
    )
    if metrics is not None:
        metrics.env_step.observe(step.env_s)
        metrics.sandbox.observe(step.sandbox_s)
    return step


def sandbox_seconds(env: gymnasium.Env[Any, Any]) -> float:
    """What the env reports of its last call's time in sandbox calls (0.0 if it reports none)."""
    try:
        seconds = env.get_wrapper_attr("sandbox_s")
    except AttributeError:
        return 0.0
    return float(seconds) if isinstance(seconds, (int, float)) else 0.0


def messages_of(observation: Any) -> list[dict[str, str]]:
    """An env's observation (chat messages) as plain role/content dicts."""
    return [{"role": str(m["role"]), "content": str(m["content"])} for m in observation]


def message_text(message: dict[str, Any]) -> EnvMessage:
    """A chat message as role and text; structured tool calls (an external agent's OpenAI
    messages) become the ``<tool_call>{...}</tool_call>`` text a model writes for them."""
    text = str(message.get("content") or "")
    for call in message.get("tool_calls") or ():
        function = call.get("function", {}) if isinstance(call, dict) else {}
        arguments = function.get("arguments", {})
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):
                arguments = json.loads(arguments)
        body = json.dumps({"name": function.get("name"), "arguments": arguments})
        text += f"<tool_call>{body}</tool_call>"
    return EnvMessage(role=str(message.get("role")), content=text)


@dataclasses.dataclass(frozen=True)
class EpisodeKey:
    """What a trajectory is an episode of."""

    group_id: str
    env_id: str
    task_seed: int | None
    source: Literal["rollout", "session"]
    env_kwargs: dict[str, object] = dataclasses.field(default_factory=dict)
    agent: str | None = None  # the agent key's name, for a session


class EpisodeRecorder:
    """Builds one episode's ``Trajectory``; see the module docstring."""

    def __init__(self, key: EpisodeKey):
        self.key = key
        self.transcript: Transcript | None = None
        self.turns: list[TurnRecord] = []
        self.reward = 0.0
        self.terminated = False
        self.truncated = False
        self.truncated_by_context = False
        self.invalid_reason: str | None = None
        self.messages: list[EnvMessage] = []
        self.tools: list[dict[str, Any]] | None = None

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    def start(
        self, prompt_ids: Sequence[int], *, tools: Sequence[dict[str, Any]] | None = None
    ) -> Transcript:
        """The first prompt (the opening messages, tokenized) and the tools it offered."""
        self.transcript = Transcript(list(prompt_ids))
        self.tools = list(tools) if tools else None
        return self.transcript

    def said(self, messages: Sequence[dict[str, Any]]) -> None:
        """Messages that entered the conversation, as text (for export; see the docstring)."""
        self.messages += [message_text(m) for m in messages]

    def model_turn(self, context: Sequence[int], generation: Generation) -> None:
        """The model sampled ``generation`` from ``context``: a new turn."""
        assert self.transcript is not None, "start() comes first"
        self.transcript.add_model(generation.token_ids, generation.logprobs)
        self.turns.append(
            TurnRecord(
                index=len(self.turns),
                policy_version=generation.policy_version,
                context_tokens=len(context),
                completion_tokens=len(generation.token_ids),
                env_tokens=0,
                cached_tokens=generation.cached_tokens,
                finish_reason=generation.finish_reason,
                model_s=generation.model_s,
                queue_s=generation.queue_s,
            )
        )

    def env_step(self, step: EnvStep, *, answers_model_turn: bool = True) -> None:
        """The env stepped; ``answers_model_turn`` False: on an action the model did not make."""
        if answers_model_turn and self.turns:
            self.turns[-1] = self.turns[-1].model_copy(
                update={"reward": step.reward, "env_s": step.env_s, "sandbox_s": step.sandbox_s}
            )
        if answers_model_turn:  # the model earns only what its own actions earned
            self.reward += step.reward
        self.terminated, self.truncated = step.terminated, step.truncated
        if step.infra_error is not None:
            self.fail(f"infrastructure failure: {step.infra_error}")

    def env_reply(self, token_ids: Sequence[int]) -> None:
        """The env's reply as tokens (never trained on), counted on the last turn."""
        assert self.transcript is not None, "start() comes first"
        self.transcript.add_env(token_ids)
        if self.turns:
            last = self.turns[-1]
            self.turns[-1] = last.model_copy(
                update={"env_tokens": last.env_tokens + len(token_ids)}
            )

    def context_full(self) -> None:
        """The next turn cannot fit the model's context: the episode is cut here."""
        self.truncated = self.truncated_by_context = True

    def fail(self, reason: str) -> None:
        """End the episode as an infrastructure failure: invalid, never trained on."""
        self.truncated = True
        if self.invalid_reason is None:
            self.invalid_reason = reason

    def trajectory(self, current_version: int) -> Trajectory:
        """The episode so far; an unfinished one is truncated. ``current_version`` stands in
        for the versions of an episode without a model turn."""
        transcript = self.transcript or Transcript([])
        versions = [t.policy_version for t in self.turns] or [current_version]
        logprobs = transcript.logprobs
        if not all(math.isfinite(lp) for lp in logprobs):
            self.fail("the engine returned a non-finite logprob")
            logprobs = [lp if math.isfinite(lp) else 0.0 for lp in logprobs]
        return Trajectory(
            id=uuid.uuid4().hex,
            group_id=self.key.group_id,
            env_id=self.key.env_id,
            task_seed=self.key.task_seed,
            source=self.key.source,
            agent=self.key.agent,
            env_kwargs=dict(self.key.env_kwargs),
            prompt_ids=transcript.prompt_ids,
            completion_ids=transcript.completion_ids,
            logprobs=logprobs,
            loss_mask=transcript.loss_mask,
            reward=self.reward,
            terminated=self.terminated,
            truncated=self.truncated or not self.terminated,
            truncated_by_context=self.truncated_by_context,
            valid=self.invalid_reason is None,
            invalid_reason=self.invalid_reason,
            min_version=min(versions),
            max_version=max(versions),
            turns=self.turns,
            created_at=time.time(),
            messages=self.messages,
            tools=self.tools,
        )
