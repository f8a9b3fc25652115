"""An OpenEnv environment (its HTTP/WebSocket server, by URL) as a rollgym text env.

``openenv/Remote-v0`` plays one episode per WebSocket session of openenv-core's own client
(``GenericEnvClient``): ``reset`` opens the session (once) and resets it, ``step`` sends
the agent's text as one field of the server's action and returns what it observed::

    env = rollgym.envs.make("openenv/Remote-v0", base_url="http://127.0.0.1:8100",
                            action_field="message", max_episode_steps=8)

Observations become chat messages: an observation with ``messages`` (role/content dicts,
what rollgym's own OpenEnv server sends) passes them on; any other observation becomes one
user message, its ``text_field`` if given, else the observation as JSON. The reward is
the server's (None: 0.0), ``done`` terminates; an observation's ``tools`` (OpenAI function
format) are the env's ``tools``, its ``failure``/``error`` pass into ``info``. The turn
limit is ``max_episode_steps`` (``truncated``). A server that fails or does not answer
within ``message_timeout_s`` is an infrastructure failure (``envs.ChatAdapter`` says so);
the time of each round trip is the env's time in the runner's measurements. Episode
options ``task_id`` and ``episode_id`` go to the server's reset.
"""

from __future__ import annotations

import json
from typing import Any

import gymnasium

from rollgym.envs.messages import Message, Observation, clean_text, user
from rollgym.envs.spaces import ChatText, Messages

ENV_ID = "openenv/Remote-v0"
RESET_OPTIONS = ("task_id", "episode_id")


class OpenEnvRemote(gymnasium.Env[Observation, str]):
    """The env an OpenEnv server at ``base_url`` serves; see the module docstring."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - Gymnasium's own type

    def __init__(
        self,
        *,
        base_url: str,
        action_field: str = "message",
        text_field: str | None = None,
        message_timeout_s: float = 60.0,
    ) -> None:
        from openenv.core import GenericEnvClient

        self.observation_space = Messages()
        self.action_space = ChatText()
        self.base_url, self.action_field, self.text_field = base_url, action_field, text_field
        self.tools: list[dict[str, Any]] | None = None
        self._client = GenericEnvClient(
            base_url=base_url, message_timeout_s=message_timeout_s
        ).sync()
        self._connected = False

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        super().reset(seed=seed)
        if not self._connected:
            self._client.connect()
            self._connected = True
        extra = {key: value for key, value in (options or {}).items() if key in RESET_OPTIONS}
        result = self._client.reset(seed=seed, **extra)
        observation = dict(result.observation)
        self.tools = observation.get("tools") or self.tools
        return self._messages(observation), {"task_id": observation.get("task_id")}

    def step(self, action: str) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        result = self._client.step({self.action_field: action})
        observation = dict(result.observation)
        info = {key: observation.get(key) for key in ("failure", "error", "task_id")}
        reward = 0.0 if result.reward is None else float(result.reward)
        return self._messages(observation), reward, bool(result.done), False, info

    def close(self) -> None:
        """End the session (the server frees what it held for it)."""
        if self._connected:
            self._connected = False
            self._client.close()
        super().close()

    def _messages(self, observation: dict[str, Any]) -> Observation:
        messages = observation.get("messages")
        if isinstance(messages, list):
            return tuple(_message(m) for m in messages)
        if self.text_field is not None:
            text = str(observation.get(self.text_field, ""))
        else:
            text = json.dumps(observation, ensure_ascii=False, sort_keys=True)
        text = clean_text(text)
        return (user(text),) if text else ()


def _message(raw: Any) -> Message:
    return {"role": str(raw["role"]), "content": clean_text(str(raw["content"]))}


def register() -> None:
    """Register ``openenv/Remote-v0`` (the ``rollgym.envs`` entry point calls this)."""
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(
            id=ENV_ID, entry_point="rollgym.envs.openenv_remote:OpenEnvRemote", max_episode_steps=16
        )
