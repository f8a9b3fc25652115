"""``make``: what the server calls to build any registered text environment.

A user's env is found the ways Gymnasium users already know, with no change to rollgym:

1. ``make("my_package.envs:MyEnv-v0")``: Gymnasium's own ``"module:id"`` syntax imports
   ``my_package.envs`` (which calls ``gymnasium.register``) before making the env;
2. a package entry point in the group ``rollgym.envs``, loaded by ``load_user_envs`` (once
   per process; ``make`` calls it)::

       # the user's pyproject.toml
       [project.entry-points."rollgym.envs"]
       my_envs = "my_package.envs"            # a module that registers on import
       # or: my_envs = "my_package.envs:register"   (a function, called with no arguments)

The env is then adapted to the chat contract (``ChatAdapter``) unless it is a rollgym
``ChatEnv`` already. A broken entry point does not stop other envs from being served; it is
named in the ``EnvLoadError`` only if the requested id is not found.
"""

from __future__ import annotations

import functools
import importlib.metadata
import inspect
from typing import Any

import gymnasium

from rollgym.envs.adapter import ChatAdapter
from rollgym.envs.core import ChatEnv
from rollgym.envs.errors import EnvLoadError

ENTRY_POINT_GROUP = "rollgym.envs"


@functools.cache
def load_user_envs() -> dict[str, str | None]:
    """Load every ``rollgym.envs`` entry point once; ``{name: None or the error}``."""
    outcome: dict[str, str | None] = {}
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = entry.load()
            if callable(loaded) and not inspect.ismodule(loaded):
                loaded()
            outcome[entry.name] = None
        except Exception as exc:  # a broken third-party package must not stop the others
            outcome[entry.name] = f"{entry.value}: {exc!r}"
    return outcome


def make(env_id: str, **kwargs: Any) -> gymnasium.Env[Any, str]:
    """``gymnasium.make(env_id, **kwargs)``, with user packages loaded and the chat contract.

    Raises ``EnvLoadError`` when the id is unknown, its module cannot be imported, or the env
    does not observe text.
    """
    failures = {name: err for name, err in load_user_envs().items() if err is not None}
    try:
        env = gymnasium.make(env_id, **kwargs)
    except (gymnasium.error.Error, ModuleNotFoundError) as exc:
        broken = "".join(f"\n  entry point {name} failed: {err}" for name, err in failures.items())
        raise EnvLoadError(f"cannot make {env_id!r}: {exc}{broken}") from exc
    if isinstance(env.unwrapped, ChatEnv):
        return env
    try:
        return ChatAdapter(env)
    except EnvLoadError:
        env.close()
        raise
