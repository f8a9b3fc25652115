"""The errors of ``envs``: one root, with the failure kind in the type.

::

    EnvError
    ├── InfraError(EnvError)                  not the agent's fault: no box to be had, the box
    │                                         died while setting up a task, a user's env crashed
    │                                         in ``reset``. Raised by ``reset``; ``step`` reports
    │                                         the same kind of failure as ``info["failure"] ==
    │                                         "infra"`` instead, so the episode's data survives.
    ├── ActionError(EnvError, ValueError)     the agent's message could not be parsed (no code
    │                                         block, bad tool-call JSON, unknown tool...). Envs
    │                                         catch it and send its text back to the agent.
    ├── TaskNotFound(EnvError, LookupError)   ``reset(options={"task_id": ...})`` names no task
    ├── EpisodeStateError(EnvError, RuntimeError)
    │                                         ``step`` before ``reset``, after the episode ended,
    │                                         or on a closed env
    └── EnvLoadError(EnvError, LookupError)   an env id or a ``rollgym.envs`` entry point could
                                              not be loaded or does not speak text
"""

from __future__ import annotations


class EnvError(Exception):
    """Root of all ``envs`` errors."""


class InfraError(EnvError):
    """An infrastructure failure: the episode cannot be trusted, and it is not the agent's."""


class ActionError(EnvError, ValueError):
    """The agent's message is malformed; ``str(error)`` is the feedback the agent gets."""


class TaskNotFound(EnvError, LookupError):
    """``reset`` was asked for a task id the env's task set does not have."""


class EpisodeStateError(EnvError, RuntimeError):
    """A call the episode's state does not allow (step before reset, after the end, closed)."""


class EnvLoadError(EnvError, LookupError):
    """An environment could not be found, imported or adapted to the chat contract."""
