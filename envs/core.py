"""``ChatEnv``: the base of multi-turn text-agent environments, on ``gymnasium.Env``.

The agent's action is its raw message (``str``); the observation is a tuple of chat
messages: the opening messages on ``reset``, the messages appended this turn on ``step``.
A subclass writes three hooks and two reward callables; the base does the rest the same way
for every env (failure kinds, rewards, episode state, async)::

    _open(options)    -> Opening     pick a task (with self.np_random), opening messages
    _turn(action)     -> Turn        act on one message; raise ActionError to reject it
    _rejected(error)  -> StepT       the step outcome of a rejected message
    _episode()        -> EpisodeT    what the terminal reward sees
    step_reward(turn.outcome)        -> float, every step
    terminal_reward(self._episode()) -> float, on the step that terminates (optional)

``info`` on every step: ``failure`` (None | "task" | "infra"), ``error`` (str | None),
``turn``, ``step_reward``, ``terminal_reward`` (None unless terminated) and ``task_id``; it
holds no wall-clock time, so the same seed and actions give the same infos (Gymnasium's
``check_env`` asks that). Time is the runner's business: it times ``step`` itself, and reads
the part spent in sandbox calls beside ``info``, from ``env.get_wrapper_attr("sandbox_s")``. A rejected
action (``ActionError``) is a task failure fed back to the agent as a user message; so is
an ``AgentFault`` reaching the base (the agent's own command broke the box's limits: the box
lives on, and the agent must not be able to make a losing episode vanish that way). An
infrastructure failure (any other ``SandboxError`` reaching the base, a reward callable that raises
or returns a non-finite number) ends the episode with ``truncated=True``,
``failure="infra"`` and ``reward=0.0`` that must not be trained on; ``reset`` raises
``InfraError`` instead. The turn limit is not the env's business: ``gymnasium.make``'s
``TimeLimit`` truncates (``max_episode_steps``), so a terminal reward is only paid when the
env itself terminates.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
import math
from collections.abc import Callable
from typing import Any, Generic, Literal, TypeVar

import gymnasium

from rollgym.envs.errors import ActionError, EpisodeStateError, InfraError
from rollgym.envs.messages import Message, Observation, clean_text, first_bad_char, user
from rollgym.envs.programs import Meter
from rollgym.envs.spaces import ChatText, Messages
from rollgym.sandboxes.base import AgentFault, SandboxError

StepT = TypeVar("StepT")
EpisodeT = TypeVar("EpisodeT")
Failure = Literal["task", "infra"]


@dataclasses.dataclass(frozen=True)
class Opening:
    """What ``reset`` shows: the task's id and the opening messages."""

    task_id: str
    messages: tuple[Message, ...]


@dataclasses.dataclass(frozen=True)
class Turn(Generic[StepT]):
    """What one turn produced, before rewards and timing.

    ``outcome`` is what the step reward sees; ``failure="task"`` marks an action that failed
    by the agent's doing (its ``error`` says how).
    """

    messages: tuple[Message, ...]
    outcome: StepT
    terminated: bool = False
    failure: Literal["task"] | None = None
    error: str | None = None


class EpisodeState(enum.Enum):
    IDLE = "idle"  # made, never reset
    RUNNING = "running"
    DONE = "done"  # terminated, or ended by an infrastructure failure
    CLOSED = "closed"


class ChatEnv(gymnasium.Env[Observation, str], Generic[StepT, EpisodeT], abc.ABC):
    """Base of rollgym's chat environments; see the module docstring for the contract.

    A ``str`` action longer than ``max_action_chars`` is rejected with feedback.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - Gymnasium's own type
    tools: list[dict[str, Any]] | None = None

    def __init__(
        self,
        *,
        step_reward: Callable[[StepT], float],
        terminal_reward: Callable[[EpisodeT], float] | None = None,
        max_action_chars: int = 32_000,
    ):
        self.action_space = ChatText(max_length=max_action_chars)
        self.max_action_chars = max_action_chars
        self.observation_space = Messages()
        self.step_reward = step_reward
        self.terminal_reward = terminal_reward
        self._state = EpisodeState.IDLE
        self._task_id: str | None = None
        self._turns = 0
        self._meter = Meter()

    @property
    def turns(self) -> int:
        """Steps taken in this episode (rejected actions included)."""
        return self._turns

    @property
    def sandbox_s(self) -> float:
        """Seconds the last ``reset`` or ``step`` spent in sandbox calls (0.0 without a box)."""
        return self._meter.seconds

    # --- hooks ----------------------------------------------------------------------------

    @abc.abstractmethod
    def _open(self, options: dict[str, Any]) -> Opening: ...

    @abc.abstractmethod
    def _turn(self, action: str) -> Turn[StepT]: ...

    @abc.abstractmethod
    def _rejected(self, error: str) -> StepT:
        """The step outcome of an action rejected with ``error`` (what the step reward sees)."""

    @abc.abstractmethod
    def _episode(self) -> EpisodeT: ...

    async def _aopen(self, options: dict[str, Any]) -> Opening:
        return self._open(options)

    async def _aturn(self, action: str) -> Turn[StepT]:
        return self._turn(action)

    # --- Gymnasium API --------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        super().reset(seed=seed)
        self._begin_reset()
        try:
            opening = self._open(dict(options or {}))
        except SandboxError as exc:
            raise InfraError(f"reset failed in the sandbox: {exc!r}") from exc
        return self._opened(opening)

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """``reset`` with sandbox I/O awaited instead of blocking."""
        super().reset(seed=seed)
        self._begin_reset()
        try:
            opening = await self._aopen(dict(options or {}))
        except SandboxError as exc:
            raise InfraError(f"reset failed in the sandbox: {exc!r}") from exc
        return self._opened(opening)

    def step(self, action: str) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        self._begin_step(action)
        try:
            turn = self._turn(_checked_text(action, self.max_action_chars))
        except ActionError as exc:
            turn = self._rejection(str(exc))
        except AgentFault as exc:
            turn = self._rejection(f"Your command broke the sandbox's limits: {exc}")
        except SandboxError as exc:
            return self._infra(f"sandbox failure: {exc!r}")
        except InfraError as exc:
            return self._infra(str(exc))
        return self._finish(turn)

    async def astep(self, action: str) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """``step`` with sandbox I/O awaited instead of blocking."""
        self._begin_step(action)
        try:
            turn = await self._aturn(_checked_text(action, self.max_action_chars))
        except ActionError as exc:
            turn = self._rejection(str(exc))
        except AgentFault as exc:
            turn = self._rejection(f"Your command broke the sandbox's limits: {exc}")
        except SandboxError as exc:
            return self._infra(f"sandbox failure: {exc!r}")
        except InfraError as exc:
            return self._infra(str(exc))
        return self._finish(turn)

    def close(self) -> None:
        self._state = EpisodeState.CLOSED
        super().close()

    # --- the shared bookkeeping -----------------------------------------------------------

    def _begin_reset(self) -> None:
        if self._state is EpisodeState.CLOSED:
            raise EpisodeStateError("reset on a closed env")
        self._turns, self._meter.seconds = 0, 0.0

    def _opened(self, opening: Opening) -> tuple[Observation, dict[str, Any]]:
        self._state, self._task_id = EpisodeState.RUNNING, opening.task_id
        return _fresh(opening.messages), {"task_id": opening.task_id}

    def _begin_step(self, action: object) -> None:
        if self._state is not EpisodeState.RUNNING:
            raise EpisodeStateError(f"step on an env whose episode is {self._state.value}")
        if not isinstance(action, str):
            raise TypeError(f"an action is the agent's text (str), got {type(action).__name__}")
        self._turns += 1
        self._meter.seconds = 0.0

    def _rejection(self, error: str) -> Turn[StepT]:
        """A rejected action: the error goes back to the agent; the turn counts."""
        error = clean_text(error)
        return Turn((user(error),), self._rejected(error), failure="task", error=error)

    def _finish(self, turn: Turn[StepT]) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        try:
            step_reward = _call_reward(self.step_reward, turn.outcome)
            terminal_reward = None
            if turn.terminated and self.terminal_reward is not None:
                terminal_reward = _call_reward(self.terminal_reward, self._episode())
        except RewardFailed as exc:
            return self._infra(str(exc), turn.messages)
        if turn.terminated:
            self._state = EpisodeState.DONE
        info = self._info(turn.failure, turn.error)
        info.update(step_reward=step_reward, terminal_reward=terminal_reward)
        reward = step_reward + (terminal_reward or 0.0)
        return _fresh(turn.messages), reward, turn.terminated, False, info

    def _infra(
        self, error: str, messages: tuple[Message, ...] = ()
    ) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """End the episode on an infrastructure failure: flagged, never a plain reward."""
        self._state = EpisodeState.DONE
        info = self._info("infra", error)
        info.update(step_reward=None, terminal_reward=None)
        return _fresh(messages), 0.0, False, True, info

    def _info(self, failure: Failure | None, error: str | None) -> dict[str, Any]:
        return {
            "task_id": self._task_id,
            "turn": self._turns,
            "failure": failure,
            "error": error,
        }


def _checked_text(action: str, max_chars: int) -> str:
    if len(action) > max_chars:
        raise ActionError(
            f"Your message is too long ({len(action)} characters; the limit is {max_chars})."
        )
    bad = first_bad_char(action)
    if bad is not None:
        raise ActionError(
            f"Your message has a character that is not valid Unicode text at position {bad}."
        )
    return action


class RewardFailed(Exception):
    """A reward callable raised or returned a non-finite number (internal to ``_finish``)."""


def _call_reward(reward: Callable[[Any], float], argument: Any) -> float:
    name = getattr(reward, "__qualname__", type(reward).__qualname__)
    try:
        value = float(reward(argument))
    except Exception as exc:  # any crash of a reward callable is an infrastructure failure
        raise RewardFailed(f"reward callable {name} crashed: {exc!r}") from exc
    if not math.isfinite(value):
        raise RewardFailed(f"reward callable {name} returned {value}")
    return value


def _fresh(messages: tuple[Message, ...]) -> Observation:
    """New dicts on every call, so callers may keep or edit what they were given."""
    return tuple({"role": m["role"], "content": m["content"]} for m in messages)
