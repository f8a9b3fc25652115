"""The wire schema: every body that crosses the server's HTTP boundary, as pydantic models.

This module is the contract between the rollout server and its clients (the trainer,
external agents, dashboards); like the rest of ``rollgym.contract`` it imports nothing of
the server, so the trainer can depend on it without pulling in vLLM.

Token contract: a trajectory holds the exact sampled token ids, their
behaviour logprobs and a loss mask. ``prompt_ids`` is the first prompt (system + first
observation); ``completion_ids`` is everything after it, model and environment tokens
interleaved in the order they entered the context; ``logprobs`` and ``loss_mask`` align
with ``completion_ids`` (environment tokens: mask 0, logprob 0.0).

Version contract: every turn records the policy version that generated it; a trajectory
carries the lowest and highest (``min_version``/``max_version``); the staleness window
(``rollgym.contract.staleness``) decides from ``min_version`` (or, with the ``"turn"`` unit,
``max_version``) whether it may be trained on.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

from rollgym.contract.canary import CanaryResult
from rollgym.contract.shape import MAX_GROUP_SIZE, RunShape
from rollgym.contract.staleness import StalenessUnit

# Bounds of what a client may send. A body is also capped as a whole (``max_body_bytes``);
# these keep each field to what can work, so nothing unbounded reaches an env or the engine.
MAX_ENV_ID_CHARS = 256
MAX_PATH_CHARS = 4096
MAX_SEED = 2**63 - 1  # Gymnasium seeds are non-negative integers
MAX_TOKENS = 1 << 20  # per model turn; the server also checks its own max_model_len
MAX_KWARGS = 32
MAX_KWARG_CHARS = 4096
MAX_KWARG_ITEMS = 1024
MAX_VERSION = 2**62  # policy versions and staleness stay well inside SQLite's 64-bit integers


def _valid_unicode(text: str) -> str:
    """Text must encode as UTF-8: a lone surrogate (``"\\ud800"``) cannot be tokenized."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"a lone surrogate at character {exc.start} is not valid text") from None
    return text


Text = Annotated[str, AfterValidator(_valid_unicode)]
"""Any valid Unicode text (lone surrogates refused)."""

EnvId = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_ENV_ID_CHARS),
    AfterValidator(_valid_unicode),
]
Seed = Annotated[int, Field(ge=0, le=MAX_SEED)]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
KwargScalar = (
    Annotated[str, StringConstraints(max_length=MAX_KWARG_CHARS), AfterValidator(_valid_unicode)]
    | bool
    | int
    | FiniteFloat
    | None
)
GroupId = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[\w.:-]+$")]
KwargValue = KwargScalar | Annotated[list[KwargScalar], Field(max_length=MAX_KWARG_ITEMS)]
EnvKwargs = Annotated[
    dict[Annotated[str, StringConstraints(min_length=1, max_length=64)], KwargValue],
    Field(max_length=MAX_KWARGS, description="JSON scalars or flat lists of them (no nesting)"),
]
"""An env's keyword arguments as a client may send them: bounded, at most one level deep."""


class _Input(BaseModel):
    """Inputs we own are strict: an unknown field is a client bug, so it gets a 422; floats
    must be finite (``NaN`` and ``Infinity`` are refused)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ErrorCode(StrEnum):
    """The ``error`` codes of ``ErrorBody``: clients branch on these, never on messages.

    The server's exception classes carry them (``rollgym.server.errors``); the trainer's
    client and the test fakes read them from here, so the two sides cannot drift apart.
    """

    SERVER_ERROR = "server_error"
    BAD_REQUEST = "bad_request"
    INVALID_REQUEST = "invalid_request"  # the body does not fit its pydantic model
    HTTP_ERROR = "http_error"
    BAD_WEIGHTS = "bad_weights"
    TRUNCATED_WEIGHTS = "truncated_weights"
    WEIGHTS_TOO_LARGE = "weights_too_large"
    TRANSCRIPT_MISMATCH = "transcript_mismatch"
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"
    VERSION_MISMATCH = "version_mismatch"
    UPDATE_IN_PROGRESS = "update_in_progress"
    TOO_MANY_SESSIONS = "too_many_sessions"
    BUFFER_CLOSED = "buffer_closed"
    NOT_ENABLED = "not_enabled"
    ENGINE_FAILURE = "engine_failure"
    TOKEN_PREFIX = "token_prefix"
    SERVER_LOST = "server_lost"  # a cluster's server died: the session or call it held is gone
    NO_SERVER = "no_server"  # a cluster has no server in rotation right now
    REQUEST_TOO_LARGE = "request_too_large"
    ENV_NOT_ALLOWED = "env_not_allowed"
    CONTEXT_FULL = "context_full"
    WINDOW_FULL = "window_full"  # the staleness window has no room: retry after Retry-After
    ENV_FAILURE = "env_failure"  # the env failed (raised, or reported an infrastructure fault)
    QUOTA_EXCEEDED = "quota_exceeded"  # an agent key over a quota; Retry-After says when


class ErrorBody(BaseModel):
    """The one error body of every 4xx/5xx answer."""

    error: str = Field(description="a stable machine-readable code (``ErrorCode``)")
    message: str = Field(description="what is wrong and how to fix it")


# --- trajectories -------------------------------------------------------------------------


class EnvMessage(BaseModel):
    """A chat message as environments show it (``rollgym.envs.messages.Message`` on the wire)."""

    role: str
    content: str


class TurnRecord(BaseModel):
    """One model turn and the environment step that answered it, with its costs."""

    model_config = ConfigDict(allow_inf_nan=False)

    index: int
    policy_version: int
    context_tokens: int = Field(description="prompt length the model saw this turn")
    completion_tokens: int
    env_tokens: int = Field(description="tokens the environment appended after this turn")
    cached_tokens: int = Field(0, description="prompt tokens served from the prefix cache")
    reward: float = 0.0
    finish_reason: str | None = None
    model_s: float = Field(0.0, description="time generating (engine), queue excluded")
    queue_s: float = Field(0.0, description="time waiting for the engine to take the request")
    env_s: float = Field(0.0, description="time in env.step, sandbox included")
    sandbox_s: float = Field(0.0, description="part of env_s spent in the sandbox")


class Trajectory(BaseModel):
    """One episode, token-faithful, ready to train on.

    Every float is finite (a ``NaN`` reward or logprob cannot even be built), so nothing
    non-finite can reach the buffer or the trainer from any path.
    """

    model_config = ConfigDict(allow_inf_nan=False)

    id: str
    group_id: str
    env_id: str
    task_seed: int | None = None
    source: Literal["rollout", "session"] = "rollout"
    agent: str | None = Field(
        None, description="the agent key's name that played a session; None for rollouts"
    )
    env_kwargs: dict[str, object] = Field(
        default_factory=dict, description="the kwargs the env was made with"
    )
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    loss_mask: list[int]
    reward: float = Field(description="the episode's return (sum of step rewards)")
    terminated: bool
    truncated: bool
    truncated_by_context: bool = Field(
        False, description="cut because the context (max_model_len) was full"
    )
    valid: bool = Field(True, description="False after an infrastructure failure: never trained on")
    invalid_reason: str | None = None
    min_version: int
    max_version: int
    turns: list[TurnRecord]
    created_at: float
    messages: list[EnvMessage] = Field(
        default_factory=list,
        description="the conversation as text, for export only (the token ids are what is "
        "trained on): the opening messages, each action as the env received it, the replies",
    )
    tools: list[dict[str, object]] | None = Field(
        None, description="the tools the episode offered (OpenAI function format), if any"
    )

    @model_validator(mode="after")
    def _aligned(self) -> Trajectory:
        n = len(self.completion_ids)
        if len(self.logprobs) != n or len(self.loss_mask) != n:
            raise ValueError(
                f"logprobs ({len(self.logprobs)}) and loss_mask ({len(self.loss_mask)}) "
                f"must align with completion_ids ({n})"
            )
        if any(m not in (0, 1) for m in self.loss_mask):
            raise ValueError("loss_mask holds only 0 (environment) and 1 (model)")
        if self.min_version > self.max_version:
            raise ValueError("min_version must be <= max_version")
        return self


class TrajectoryGroup(BaseModel):
    """The G samples of one task that GRPO compares with each other."""

    group_id: str
    env_id: str
    task_seed: int | None = None
    trajectories: list[Trajectory]

    @property
    def min_version(self) -> int:
        return min(t.min_version for t in self.trajectories)

    @property
    def max_version(self) -> int:
        return max(t.max_version for t in self.trajectories)


# --- buffer: the trainer's side -----------------------------------------------------------


class PullRequest(_Input):
    """Long-poll for complete groups inside the staleness window.

    The server answers as soon as ``num_groups`` groups are ready, or after ``timeout_s``
    with what it has (possibly none). Groups older than the window are dropped and counted.
    Pulled groups are leased to ``lease_id`` until acknowledged.
    """

    trainer_version: int = Field(ge=0, le=MAX_VERSION)
    max_staleness: int = Field(ge=0, le=MAX_VERSION)
    staleness_unit: StalenessUnit = Field(
        "group",
        description="group: a group is as old as its oldest turn; turn: as its newest (the "
        "trainer masks the older turns; rollgym.contract.staleness)",
    )
    num_groups: int = Field(gt=0, le=4096)
    timeout_s: float = Field(30.0, ge=0, le=600)


class PullResponse(BaseModel):
    lease_id: str | None
    groups: list[TrajectoryGroup]
    dropped_stale: int = Field(description="trajectories dropped as stale by this pull")
    policy_version: int


class AckRequest(_Input):
    """Confirms that leased groups were trained on (idempotent)."""

    group_ids: list[Annotated[str, StringConstraints(max_length=128)]] = Field(max_length=100_000)


# --- rollout jobs -------------------------------------------------------------------------


class SamplingSettings(_Input):
    temperature: float = Field(1.0, ge=0, le=2, description="vLLM and OpenAI take 0 to 2")
    top_p: float = Field(1.0, gt=0, le=1)
    max_tokens: int = Field(64, gt=0, le=MAX_TOKENS, description="per model turn")


class MixedEnv(_Input):
    """One more env of a job's mixture (``RolloutJob.mixture``)."""

    env_id: EnvId
    env_kwargs: EnvKwargs = Field(default_factory=dict)
    max_turns: int | None = Field(
        None, ge=1, le=10_000, description="default: the env's max_episode_steps"
    )
    weight: float = Field(1.0, gt=0, le=1e6, description="its share of the groups, relative")


def distinct_env_ids(env_ids: list[str]) -> None:
    """Refuse a mixture that names an env twice: groups, numbers and evaluations are kept
    apart by env id, so two variants of one env need ids of their own.

    >>> distinct_env_ids(["a", "b", "a"])
    Traceback (most recent call last):
    ValueError: a mixture names a twice: register each variant under its own id (gymnasium.register(id=..., entry_point=..., kwargs=...)), its numbers are kept by id
    """
    twice = sorted({env_id for env_id in env_ids if env_ids.count(env_id) > 1})
    if twice:
        raise ValueError(
            f"a mixture names {', '.join(twice)} twice: register each variant under its own id "
            "(gymnasium.register(id=..., entry_point=..., kwargs=...)), its numbers are kept by id"
        )


class CurriculumSettings(_Input):
    """Play less the seeds whose last ``window`` groups were all solved or all failed
    (rewards all equal): only with probability ``floor`` (``server.rollout.curriculum``)."""

    window: int = Field(2, ge=1, le=64, description="recent groups of a seed looked at")
    floor: float = Field(0.1, ge=0.0, le=1.0, description="the chance a held-back seed plays")


class RolloutJob(RunShape, _Input):
    """What the sampler should run: groups of ``group_size`` episodes per task seed, in the
    run's shape (``rollgym.contract.shape``: the trainer's must be the same)."""

    env_id: EnvId
    env_kwargs: EnvKwargs = Field(default_factory=dict)
    max_turns: int | None = Field(
        None, ge=1, le=10_000, description="default: the env's max_episode_steps"
    )
    sampling: SamplingSettings = Field(default_factory=SamplingSettings)
    seeds: list[Seed] | None = Field(
        None,
        min_length=1,
        max_length=1_000_000,
        description="task seeds to cycle; default: 0, 1, 2, ...",
    )
    order: Literal["random", "length_grouped", "alternate"] = "random"
    oversample: float = Field(
        1.0, ge=1.0, le=16.0, description="run this many times the groups needed"
    )
    drop_zero_variance: bool = Field(True, description="drop groups whose rewards are all equal")
    weight: float = Field(
        1.0, gt=0, le=1e6, description="env_id's share of the groups beside mixture's, relative"
    )
    mixture: list[MixedEnv] = Field(
        default_factory=list,
        max_length=64,
        description="more envs in the same job: each group plays one env, drawn by weight "
        "among env_id and these (on the same task seeds)",
    )

    curriculum: CurriculumSettings | None = Field(
        None, description="play tasks that teach nothing less (needs a seed list); None: off"
    )

    @model_validator(mode="after")
    def _curriculum_has_seeds(self) -> RolloutJob:
        if self.curriculum is not None and self.seeds is None:
            raise ValueError(
                "curriculum needs a seed list (seeds): only tasks that come back can be played less"
            )
        return self

    @model_validator(mode="after")
    def _envs_differ(self) -> RolloutJob:
        distinct_env_ids([self.env_id, *(part.env_id for part in self.mixture)])
        return self

    def parts(self) -> list[RolloutJob]:
        """The job once per env of its mixture (``env_id``'s first), each with no mixture.

        >>> job = RolloutJob(env_id="a", mixture=[MixedEnv(env_id="b", weight=3)])
        >>> [(p.env_id, p.weight) for p in job.parts()]
        [('a', 1.0), ('b', 3.0)]
        """
        alone = self.model_copy(update={"mixture": []})
        return [alone] + [alone.model_copy(update=dict(part)) for part in self.mixture]


class EvaluationRequest(_Input):
    """Play ``samples`` episodes on each seed with the current policy, now, apart from any
    rollout job: nothing filtered, nothing stored, infrastructure failures included."""

    env_id: EnvId
    env_kwargs: EnvKwargs = Field(default_factory=dict)
    seeds: list[Seed] = Field(min_length=1, max_length=4096)
    samples: int = Field(1, ge=1, le=64, description="episodes per seed (pass@k)")
    max_turns: int | None = Field(
        None, ge=1, le=10_000, description="default: the env's max_episode_steps"
    )
    sampling: SamplingSettings = Field(default_factory=SamplingSettings)

    @model_validator(mode="after")
    def _bounded(self) -> EvaluationRequest:
        if len(self.seeds) * self.samples > 4096:
            raise ValueError("seeds x samples must be at most 4096 episodes")
        return self


class EvaluationResult(BaseModel):
    policy_version: int = Field(description="the version the episodes were sampled at")
    groups: list[TrajectoryGroup] = Field(description="one group per seed, in the seeds' order")


class RolloutStatus(BaseModel):
    running: bool
    job: RolloutJob | None
    in_flight: int
    buffered_groups: int
    completed_groups: int
    dropped_zero_variance: int
    invalid_trajectories: int
    dropped_too_few_valid: int = Field(0, description="groups left with < 2 valid samples")
    dropped_stopped: int = Field(0, description="groups cancelled by a stop or a new job")
    truncated_by_context: int = Field(0, description="episodes cut by a full context")
    error: str | None = Field(None, description="why the job stopped on its own, if it did")
    warnings: list[str] = Field(
        default_factory=list, description="what may go wrong (the context budget...)"
    )


# --- weights and versions -----------------------------------------------------------------


class WeightsFromPath(_Input):
    """Load new weights from safetensors file(s) on a volume the server can read."""

    path: Annotated[
        str,
        StringConstraints(min_length=1, max_length=MAX_PATH_CHARS, pattern=r"^[^\x00]+$"),
        AfterValidator(_valid_unicode),
    ]
    expected_version: int | None = Field(
        None, description="reject (409) unless the server is at this version: guards races"
    )


class WeightUpdateResult(BaseModel):
    policy_version: int
    bytes: int
    load_s: float = Field(
        description="time to receive, check and load the weights while the old ones served"
    )
    apply_s: float = Field(description="time the engine was paused to swap them")
    in_flight_policy: Literal["finish", "abort"]
    canary: CanaryResult | None = Field(
        None,
        description="the served-weights check of the update's probes (rollgym.contract.canary); "
        "None when the push sent none",
    )


class PolicyInfo(BaseModel):
    policy_version: int
    model: str
    updating: bool
    lora_max_rank: int | None = Field(
        None,
        description="the largest LoRA adapter rank the server serves (engine.lora): it takes "
        "adapters only; None: it takes whole weights",
    )


class NcclInit(_Input):
    """Join the trainer's NCCL group (vLLM's native weight transfer; GPU hosts only)."""

    master_address: str
    master_port: int = Field(gt=0, lt=65536)
    rank_offset: int = Field(1, ge=0)
    world_size: int = Field(gt=1)
    packed: bool = True


class NcclUpdate(_Input):
    """The tensors the trainer is about to broadcast, in order (GPU hosts only)."""

    names: list[str] = Field(min_length=1)
    dtype_names: list[str]
    shapes: list[list[int]]
    expected_version: int | None = None

    @model_validator(mode="after")
    def _aligned(self) -> NcclUpdate:
        if not len(self.names) == len(self.dtype_names) == len(self.shapes):
            raise ValueError("names, dtype_names and shapes must have the same length")
        return self


# --- small answers ------------------------------------------------------------------------


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    policy_version: int


class AckResponse(BaseModel):
    acked: int = Field(description="how many of the given group ids are acknowledged now")


# --- external-agent sessions --------------------------------------------------------------


class SessionCreate(_Input):
    """Start an episode of ``env_id`` for an external agent, alone or as one of a group.

    A group is the G sessions on one task that GRPO compares: name it with your own
    ``group_id`` and its ``group_size``, or give only ``group_size`` with a ``seed`` and the
    task key (``env_id``, ``env_kwargs``, ``seed``) names it. Members must agree on the
    task; a group without a seed plays the one the server draws for its first member.
    """

    env_id: EnvId
    env_kwargs: EnvKwargs = Field(default_factory=dict)
    seed: Seed | None = None
    group_id: GroupId | None = Field(None, description="your id of the group to join or open")
    group_size: int | None = Field(
        None, ge=1, le=MAX_GROUP_SIZE, description="sessions in the group (G)"
    )

    @model_validator(mode="after")
    def _group_named(self) -> SessionCreate:
        if self.group_id is not None and self.group_size is None:
            raise ValueError("group_id needs group_size (how many sessions the group has)")
        if self.group_size is not None and self.group_id is None and self.seed is None:
            raise ValueError(
                "a group needs a group_id or a seed (the task key is env_id, env_kwargs, seed)"
            )
        return self


class SessionCreated(BaseModel):
    session_id: str
    group_id: str = Field(description="the server's id of the session's group (its own if lone)")
    group_size: int = Field(description="1 for a lone session")
    seed: int | None = Field(description="the seed the env was reset with")
    observation: list[EnvMessage]
    tools: list[dict[str, object]] | None = Field(
        None, description="the env's tools in OpenAI function format: the chat calls' tools"
    )
    info: dict[str, object]
    policy_version: int
    warnings: list[str] = Field(
        default_factory=list, description="what may go wrong (the context budget...)"
    )


class SessionStep(_Input):
    """Step the session's env: with ``action``, or with the model's last answer.

    ``model_answer: true`` steps with the model's last answer exactly as it wrote it (up to
    a stop text, tool-call blocks included): what a client that only sees the parsed
    ``tool_calls`` cannot rebuild. Only a step on the model's own answer earns it credit.
    """

    action: Annotated[Text, StringConstraints(max_length=1 << 20)] | None = None
    model_answer: bool = Field(False, description="step with the model's last answer as written")

    @model_validator(mode="after")
    def _one_action(self) -> SessionStep:
        if (self.action is None) == (not self.model_answer):
            raise ValueError("give an action or model_answer: true, not both or neither")
        return self


class SessionStepResult(BaseModel):
    observation: list[EnvMessage]
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, object]
    tool_call_ids: list[str] | None = Field(
        None,
        description="the step acted on the model's answer and the env answered each of its "
        "tool calls with one tool message: the id of the call each observation message "
        "answers, in order; None otherwise",
    )


class ToolCallResult(BaseModel):
    """One tool call of the model's last answer, run: what a framework's tool function
    returns. The first call asked for steps the env with the answer, which runs all its
    calls; each call's id then gets its own result."""

    call_id: str
    content: str | None = Field(
        description="the env's tool message answering this call; None when the env did not "
        "answer call by call (see observation)"
    )
    observation: list[EnvMessage] | None = Field(
        None,
        description="when the env answered the answer as a whole (refused a call with a user "
        "message...): its messages, which the agent's next LLM call must carry as they are "
        "(its framework's run stops here)",
    )
    terminated: bool = Field(description="the step that ran the calls ended the episode")
    truncated: bool


class SessionClosed(BaseModel):
    session_id: str
    trajectory_id: str | None = Field(description="None when the episode had no model turn")
    persisted: bool = Field(
        description="the episode is stored now; a group member's is stored when its group "
        "settles (group_pending 0)"
    )
    valid: bool
    group_id: str
    group_pending: int = Field(
        description="sessions of the group still to close (or to open); 0: the group settled"
    )
