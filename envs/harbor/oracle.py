"""Scripted players of a Harbor task: its oracle, and an agent that does nothing.

``oracle(env)`` plays the task's ``solution/`` through the agent's own door: its first
message is one bash block that unpacks the solution's files into ``/solution`` (a link
into ``/tmp`` in every task image) and runs ``solve.sh`` in the working directory, as
Harbor's oracle agent does; its second says ``<done/>``. ``do_nothing(env)`` says
``<done/>`` at once. ``rollgym tasks check`` expects reward 1 from the first and 0 from
the second: the tests accept the solution and refuse the starting state.
"""

from __future__ import annotations

import base64
import io
import tarfile
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium

from rollgym.envs.harbor.env import HarborEnv
from rollgym.envs.harbor.task import HarborTask, TaskFormatError, task_files
from rollgym.envs.messages import Message

Policy = Callable[[Sequence[Message]], str]
DONE = "<done/>"


def oracle(env: gymnasium.Env[Any, Any]) -> Policy:
    """The oracle of the task ``env`` was last reset to."""
    task = _harbor(env).task
    first = f"```bash\n{solve_command(task)}\n```"

    def policy(history: Sequence[Message]) -> str:
        acted = any(m["role"] == "assistant" for m in history)
        return DONE if acted else first

    return policy


def do_nothing(env: gymnasium.Env[Any, Any]) -> Policy:
    """An agent that declares the task done before doing anything."""
    _harbor(env)
    return lambda history: DONE


def solve_command(task: HarborTask) -> str:
    """A shell command that unpacks ``solution/`` into /solution and runs solve.sh."""
    if not task.has_oracle:
        raise TaskFormatError(f"task {task.name}: solution/solve.sh (the oracle) is missing")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, path in task_files(task.solution_dir):
            info = archive.gettarinfo(str(path), arcname=name)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with path.open("rb") as handle:
                archive.addfile(info, handle)
    packed = base64.b64encode(buffer.getvalue()).decode()
    return (
        "mkdir -p /tmp/solution && base64 -d <<'ROLLGYM_SOLUTION' | tar -xzf - -C /tmp/solution\n"
        f"{packed}\nROLLGYM_SOLUTION\nbash /solution/solve.sh"
    )


def _harbor(env: gymnasium.Env[Any, Any]) -> HarborEnv:
    base = env.unwrapped
    if not isinstance(base, HarborEnv):
        raise TypeError(f"{type(base).__name__} is not a HarborEnv")
    return base
