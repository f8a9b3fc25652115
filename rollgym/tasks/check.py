"""``rollgym tasks check DIR``: every task in real boxes, its oracle against a do-nothing agent.

A task is sound when its tests tell a solved box from an untouched one: its oracle
(``solution/solve.sh``, played through the agent's own door by
``rollgym.envs.harbor.oracle``) must earn reward 1, and an agent that says ``<done/>`` at
once must earn 0. Each is one whole episode of ``HarborEnv`` in a box of the task's image
from a Docker ``ImagePool``, verifier and all; an episode that fails as infrastructure
(no image, a verifier that hangs or writes no reward) fails the task with its reason.
The result is one row per task with both rewards and times; ``table`` prints it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import gymnasium

from rollgym.envs.errors import EnvError
from rollgym.envs.harbor import register
from rollgym.envs.harbor.oracle import do_nothing, oracle
from rollgym.envs.harbor.task import HarborTask, read_tasks
from rollgym.envs.messages import Message
from rollgym.sandboxes.base import SandboxError, SandboxPool

Policy = Callable[[Sequence[Message]], str]
ORACLE_COMMAND_S = 120.0


@dataclasses.dataclass(frozen=True)
class Play:
    """One episode: its reward (None when it did not end with one) and why not."""

    reward: float | None
    seconds: float
    error: str | None = None


@dataclasses.dataclass(frozen=True)
class CheckRow:
    task: str
    oracle: Play
    nothing: Play

    @property
    def ok(self) -> bool:
        return self.oracle.reward == 1.0 and self.nothing.reward == 0.0

    @property
    def problem(self) -> str | None:
        if self.ok:
            return None
        for who, play, want in (("oracle", self.oracle, 1.0), ("do-nothing", self.nothing, 0.0)):
            if play.error:
                return f"{who}: {play.error}"
            if play.reward != want:
                return f"{who} earned {play.reward:g}, not {want:g}"
        return None


def check_tasks(
    folder: str | Path,
    pool: SandboxPool,
    *,
    jobs: int = 2,
    progress: Callable[[str], None] = print,
) -> list[CheckRow]:
    """Play every task of ``folder`` twice (oracle, do-nothing) on ``pool``, ``jobs`` at once."""
    tasks = read_tasks(folder)
    register()

    def one(task: HarborTask) -> CheckRow:
        row = CheckRow(
            task.name,
            _play(task, pool, oracle),
            _play(task, pool, do_nothing),
        )
        progress(f"{task.name}: {'ok' if row.ok else 'FAILED: ' + str(row.problem)}")
        return row

    with ThreadPoolExecutor(max(1, jobs), "tasks-check") as workers:
        return list(workers.map(one, tasks))


def _play(
    task: HarborTask, pool: SandboxPool, player: Callable[[gymnasium.Env[Any, Any]], Policy]
) -> Play:
    """One episode of ``task`` with ``player``'s policy; its final reward."""
    start = time.perf_counter()
    agent_s = task.agent_timeout_s or ORACLE_COMMAND_S
    env = gymnasium.make(
        "harbor/Tasks-v0",
        tasks_dir=str(task.path),
        sandbox_pool=pool,
        command_timeout_s=agent_s,
    )
    try:
        history: list[Message] = list(env.reset(options={"task_id": task.name})[0])
        policy = player(env)
        while True:
            action = policy(history)
            obs, reward, terminated, truncated, info = env.step(action)
            history += [{"role": "assistant", "content": action}, *obs]
            if info.get("failure") == "infra":
                return Play(None, time.perf_counter() - start, str(info.get("error")))
            if terminated:
                return Play(float(reward), time.perf_counter() - start)
            if truncated:
                return Play(None, time.perf_counter() - start, "the turn limit came first")
    except (EnvError, SandboxError) as exc:
        return Play(None, time.perf_counter() - start, str(exc))
    finally:
        env.close()


def table(rows: Sequence[CheckRow]) -> str:
    """The rows as a fixed-width table, with a closing count."""
    width = max([len("task"), *(len(r.task) for r in rows)])
    lines = [f"{'task':<{width}}  {'oracle':>6}  {'time':>6}  {'nothing':>7}  {'time':>6}  verdict"]
    for row in rows:
        lines.append(
            f"{row.task:<{width}}  {_reward(row.oracle):>6}  {row.oracle.seconds:>5.2f}s  "
            f"{_reward(row.nothing):>7}  {row.nothing.seconds:>5.2f}s  "
            f"{'ok' if row.ok else 'FAILED: ' + str(row.problem)}"
        )
    passed = sum(row.ok for row in rows)
    lines.append(f"{passed} tasks ok, {len(rows) - passed} failed")
    return "\n".join(lines)


def _reward(play: Play) -> str:
    return "-" if play.reward is None else f"{play.reward:g}"
