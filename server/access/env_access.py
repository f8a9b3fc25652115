"""Which environments an HTTP caller may make, and with which kwargs: one small pure check.

Two lanes reach ``envs.make`` over HTTP, and they are trusted differently:

* **agents** (``POST /v1/sessions``, no token) reach only the env ids the operator lists in
  ``EnvAccessConfig.agent_env_ids`` (shell-style patterns: ``"reasoning_gym/*"``; ``"*"``
  is every registered id), with only the kwargs declared for that env in
  ``agent_kwargs``. A ``"module:Env-v0"`` id makes the server import ``module``, so it is
  refused unless ``allow_module_ids`` is on *and* the id is listed (or matched);
* **admin** callers (rollout jobs, behind the token) may make any registered or
  ``module:`` id with any kwargs the env's constructor accepts.

On both lanes a few kwargs are never taken from a request (``HTTP_RESERVED_KWARGS``): the
sandbox pool (the server hands out its own), task files and task lists (paths and objects
of the server's side), reward callables and ``max_episode_steps`` (jobs have ``max_turns``).

    >>> access = EnvAccessConfig()
    >>> check_request(access, "rollgym/GuessNumber-v0", {"low": 1, "high": 8}, lane="agent")
    >>> check_request(access, "os:Env-v0", {}, lane="agent")
    Traceback (most recent call last):
    ...
    rollgym.server.errors.EnvNotAllowed: 'module:' env ids are off for agents (env_access.allow_module_ids)
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rollgym.envs.registration import BUILTIN_IDS
from rollgym.server.errors import EnvNotAllowed

Lane = Literal["agent", "admin"]
HTTP_RESERVED_KWARGS = frozenset(
    {"sandbox_pool", "task_file", "tasks", "step_reward", "terminal_reward", "max_episode_steps"}
)
_DECLARED: dict[str, tuple[str, ...]] = {"rollgym/GuessNumber-v0": ("low", "high")}


class EnvAccessConfig(BaseModel):
    """``ServerSettings.env_access`` (``ROLLGYM_ENV_ACCESS__*``); see the module docstring.

    The external-agents work (agent keys, quotas) narrows this per key; the check stays
    ``check_request``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    agent_env_ids: tuple[str, ...] = Field(
        (*BUILTIN_IDS, "reasoning_gym/*"),
        description="env ids (or shell-style patterns) agents may open; '*': every id",
    )
    allow_module_ids: bool = Field(
        False, description="let agents use listed 'module:Env-v0' ids (imports the module)"
    )
    agent_kwargs: dict[str, tuple[str, ...]] = Field(
        default_factory=lambda: dict(_DECLARED),
        description="per env id, the kwargs agents may set; every other kwarg is refused",
    )

    @field_validator("agent_kwargs")
    @classmethod
    def _no_reserved(cls, declared: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        for env_id, names in declared.items():
            if reserved := sorted(HTTP_RESERVED_KWARGS.intersection(names)):
                raise ValueError(f"{env_id}: {reserved} can never come from a request")
        return declared


def check_request(
    access: EnvAccessConfig, env_id: str, env_kwargs: Mapping[str, object], *, lane: Lane
) -> None:
    """Raise ``EnvNotAllowed`` unless ``lane`` may make ``env_id`` with ``env_kwargs``.

    Pure: it reads no registry (whether the id exists is ``RegistryEnvs.check``'s job).
    """
    if reserved := sorted(HTTP_RESERVED_KWARGS.intersection(env_kwargs)):
        raise EnvNotAllowed(
            f"env_kwargs {reserved} are never taken from a request: the server provides the "
            "sandbox pool and the task set; use max_turns for the turn limit"
        )
    if lane == "admin":
        return
    listed = any(fnmatch.fnmatchcase(env_id, pattern) for pattern in access.agent_env_ids)
    if ":" in env_id and not access.allow_module_ids:
        raise EnvNotAllowed("'module:' env ids are off for agents (env_access.allow_module_ids)")
    if not listed:
        raise EnvNotAllowed(
            f"agents may not open {env_id[:80]!r}; open to agents: "
            f"{', '.join(access.agent_env_ids) or 'none'} (env_access.agent_env_ids)"
        )
    declared = access.agent_kwargs.get(env_id, ())
    if undeclared := sorted(set(env_kwargs) - set(declared)):
        raise EnvNotAllowed(
            f"{env_id} does not take {undeclared} from agents; declared: "
            f"{list(declared) or 'none'} (env_access.agent_kwargs)"
        )
