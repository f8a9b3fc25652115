"""``ChatAdapter``: serve an env that is not a ``ChatEnv`` under the chat contract.

A user's plain text env (``str`` observations, e.g. a ``spaces.Text`` observation space)
becomes a chat env: each observation turns into one user message (an empty string into no
message), the action space becomes ``ChatText`` (real model output), and ``info`` gets the
contract's keys ``failure`` and ``error`` (None unless the env reports its own). An env that already
speaks chat messages passes its observations through.

Failures: an exception from the env's ``step`` is an infrastructure failure (the user's env
or its reward crashed): the step returns ``truncated=True``, ``reward=0.0``,
``failure="infra"`` and the error. An exception from ``reset`` raises ``InfraError``.
Caller mistakes (``ResetNeeded``, ``envs`` errors) pass through unchanged.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium
from gymnasium import spaces
from gymnasium.error import ResetNeeded

from rollgym.envs import aio
from rollgym.envs.errors import EnvError, EnvLoadError, InfraError
from rollgym.envs.messages import Observation, clean_text, user
from rollgym.envs.spaces import ChatText, Messages

_PASS_THROUGH = (ResetNeeded, EnvError)


def speaks_text(space: spaces.Space[Any]) -> bool:
    """Whether observations of ``space`` are plain text."""
    return isinstance(space, (spaces.Text, ChatText))


class ChatAdapter(gymnasium.Wrapper[Observation, str, Any, Any]):
    """Wraps a text or chat env so that it keeps the ``envs`` contract; see the module doc."""

    def __init__(self, env: gymnasium.Env[Any, Any]):
        if not (speaks_text(env.observation_space) or isinstance(env.observation_space, Messages)):
            raise EnvLoadError(
                f"{env} observes {env.observation_space}, not text: serve envs whose "
                "observation space is spaces.Text (str observations) or envs.spaces.Messages"
            )
        super().__init__(env)
        self._text = speaks_text(env.observation_space)
        self.observation_space = Messages()
        self.action_space = ChatText()

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        """The wrapped env's tools (OpenAI function format), or None."""
        try:
            return self.env.get_wrapper_attr("tools")
        except AttributeError:
            return None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        try:
            obs, info = self.env.reset(seed=seed, options=options)
        except _PASS_THROUGH:
            raise
        except Exception as exc:
            raise InfraError(f"{self.env} failed to reset: {exc!r}") from exc
        return self._messages(obs), dict(info)

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        try:
            obs, info = await aio.areset(self.env, seed=seed, options=options)
        except _PASS_THROUGH:
            raise
        except Exception as exc:
            raise InfraError(f"{self.env} failed to reset: {exc!r}") from exc
        return self._messages(obs), dict(info)

    def step(self, action: str) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        try:
            result = self.env.step(action)
        except _PASS_THROUGH:
            raise
        except Exception as exc:
            return self._crashed(exc)
        return self._converted(result)

    async def astep(self, action: str) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        try:
            result = await aio.astep(self.env, action)
        except _PASS_THROUGH:
            raise
        except Exception as exc:
            return self._crashed(exc)
        return self._converted(result)

    def _messages(self, obs: Any) -> Observation:
        if not self._text:
            return tuple({"role": m["role"], "content": m["content"]} for m in obs)
        text = clean_text(str(obs))
        return (user(text),) if text else ()

    def _converted(
        self, result: tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]
    ) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = result
        info = dict(info)
        info.setdefault("failure", None)
        info.setdefault("error", None)
        return self._messages(obs), float(reward), bool(terminated), bool(truncated), info

    def _crashed(self, exc: Exception) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        info = {
            "failure": "infra",
            "error": f"{self.env} crashed in step: {exc!r}",
        }
        return (), 0.0, False, True, info
