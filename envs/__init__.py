"""Gymnasium environments for multi-turn text agents, registered as ``rollgym/<Name>-v0``.

The contract the rollout runner (``server/``) relies on:

1. **Registration.** ``import envs`` registers ``rollgym/GuessNumber-v0``,
   ``rollgym/PythonTests-v0``, ``rollgym/Shell-v0``, ``rollgym/ToolUse-v0`` and
   ``rollgym/GuessTool-v0`` (GuessNumber through a sandboxed tool; string entry
   points, ``max_episode_steps`` set: a turn limit is ``truncated`` by ``TimeLimit``, never
   ``terminated``).
2. **Messages.** ``reset`` returns the opening messages (system + first user message) as a
   tuple of ``{"role": str, "content": str}`` dicts; each ``step`` returns only the messages
   the env appends this turn (a ``user`` feedback message, or ``tool`` results). Actions are
   the model's raw text (``str``). Spaces: ``envs.spaces.ChatText`` (any Unicode, empty
   included) and ``envs.spaces.Messages``.
3. **Info.** Every step: ``failure`` (None | ``"task"`` | ``"infra"``), ``error``
   (str | None); rollgym envs add ``turn``, ``task_id``, ``step_reward`` and
   ``terminal_reward``. Reset info has ``task_id``. Info holds no wall-clock time (same
   seed and actions, same infos); the seconds the last ``reset``/``step`` spent in sandbox
   calls are ``env.get_wrapper_attr("sandbox_s")`` (rollgym envs), and the runner times
   ``step`` itself. An
   infrastructure failure in ``step`` (box died, container-level timeout, crashed reward
   callable, crashed user env) returns ``truncated=True``, ``reward=0.0`` and
   ``failure="infra"``: exclude the episode from training. ``reset`` raises
   ``envs.InfraError`` instead. Rewards are separate callables (``env.step_reward``,
   ``env.terminal_reward`` on the unwrapped env) that tests run alone.
4. **Tools.** ``env.get_wrapper_attr("tools")`` is a list in OpenAI function format, or None.
   The model calls a tool by writing
   ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``; code goes in fenced blocks.
   Parsing is strict (``envs.parsing``); its errors go back to the agent as a message.
5. **Async.** ``envs.aio.areset(env, *, seed=None, options=None)`` and
   ``envs.aio.astep(env, action)`` work on any ``gymnasium.make``'d env with exact wrapper
   semantics: rollgym envs natively (sandbox I/O via the sandbox's ``a*`` methods), foreign
   sync envs in a worker thread.
6. **Sandboxes.** Sandboxed envs take a pool: ``gymnasium.make(id, sandbox_pool=pool)``;
   each ``reset`` releases the previous box and acquires one, ``close`` releases it. Without
   a pool they create, own and close a small Docker pool.
7. **Serving.** ``envs.make(env_id, **kwargs)`` loads user packages (``"module:Env-v0"``
   ids and the ``rollgym.envs`` entry point group) and adapts plain text envs (``str``
   observations) to this contract (``envs.adapter.ChatAdapter``).
8. **GuessNumber** is the demo's default task (1..16, 6 turns; ``low``/``high``/
   ``max_episode_steps`` configurable); ``envs.guess_demos`` has the oracle policy
   ``GuessPolicy(low, high, noise=0.0, seed=None)`` (a callable: conversation -> message)
   and ``demonstrations(n, *, seed=0, noise=0.0, low=1, high=16, max_turns=6)`` -> whole
   conversations for SFT warm-start.

``envs.scripted.solver(env)`` plays the reference solution of the task an env was reset to
(tests and ``bench.envs`` use it). A guide with complete examples: docs/environments.md.
"""

from __future__ import annotations

from rollgym.envs.core import ChatEnv, Opening, Turn
from rollgym.envs.errors import (
    ActionError,
    EnvError,
    EnvLoadError,
    EpisodeStateError,
    InfraError,
    TaskNotFound,
)
from rollgym.envs.messages import Message, Observation
from rollgym.envs.registration import BUILTIN, BUILTIN_IDS, register_builtin
from rollgym.envs.serving import ENTRY_POINT_GROUP, load_user_envs, make

if __name__ != "rollgym.envs":  # this folder is that subpackage (pyproject's package-dir)
    raise ImportError(f"import rollgym.envs, not {__name__}: one module, one name")

register_builtin()

__all__ = [
    "BUILTIN",
    "BUILTIN_IDS",
    "ENTRY_POINT_GROUP",
    "ActionError",
    "ChatEnv",
    "EnvError",
    "EnvLoadError",
    "EpisodeStateError",
    "InfraError",
    "Message",
    "Observation",
    "Opening",
    "TaskNotFound",
    "Turn",
    "load_user_envs",
    "make",
]
