"""The reference environments in Gymnasium's registry, under the ``rollgym/`` namespace.

String entry points (nothing is imported until an env is made) and ``max_episode_steps``,
so that ``gymnasium.make`` adds ``TimeLimit``: a turn limit is ``truncated``, never
``terminated``. Override per make: ``gymnasium.make(id, max_episode_steps=10)``.
"""

from __future__ import annotations

import dataclasses

import gymnasium


@dataclasses.dataclass(frozen=True)
class Registration:
    env_id: str
    entry_point: str
    max_episode_steps: int


BUILTIN: tuple[Registration, ...] = (
    Registration("rollgym/GuessNumber-v0", "rollgym.envs.guess_number:GuessNumberEnv", 6),
    Registration("rollgym/PythonTests-v0", "rollgym.envs.python_tests:PythonTestsEnv", 4),
    Registration("rollgym/Shell-v0", "rollgym.envs.shell:ShellEnv", 10),
    Registration("rollgym/ToolUse-v0", "rollgym.envs.tool_use:ToolUseEnv", 8),
    Registration("rollgym/GuessTool-v0", "rollgym.envs.guess_tool:GuessToolEnv", 3),
    Registration("rollgym/Compute-v0", "rollgym.envs.compute:ComputeEnv", 4),
)

BUILTIN_IDS: tuple[str, ...] = tuple(entry.env_id for entry in BUILTIN)


def register_builtin() -> None:
    """Register the reference envs (idempotent)."""
    for entry in BUILTIN:
        if entry.env_id not in gymnasium.registry:
            gymnasium.register(
                id=entry.env_id,
                entry_point=entry.entry_point,
                max_episode_steps=entry.max_episode_steps,
            )
