"""Shell: bring the sandbox's work dir to a goal state with shell commands.

Each turn the agent sends one ```bash block; the env runs it in the box (``bash -c`` in
the work dir, a time limit per command) and shows its exit code and output. After every
command a checker runs the task's checks (shell tests, each with its own time limit) and
the episode terminates once all of them hold. A task's checks are written so that none
holds before the agent acts.

Reward: ``ChecksProgressReward`` pays, each step, how much the best fraction of holding
checks improved (the return is the best fraction reached, 1.0 = goal reached); a rejected
message costs ``invalid_penalty``. No terminal reward by default.

Task set: ``envs/tasks/shell.jsonl`` (24 tasks), or ``tasks=``/``task_file=``.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Callable, Sequence
from typing import Any

from typing_extensions import Unpack

from rollgym.envs.core import Opening, Turn
from rollgym.envs.errors import InfraError
from rollgym.envs.messages import clip_text, system, user
from rollgym.envs.parsing import extract_code
from rollgym.envs.programs import Program, RunShell, shell
from rollgym.envs.sandboxed import SandboxEnv, SandboxOptions, describe_result
from rollgym.envs.tasksets import ShellTask, choose, task_set
from rollgym.sandboxes.base import SandboxPool

SYSTEM_PROMPT = (
    "You are in a Linux shell, in your working directory. Reach the goal the user describes. "
    "Each reply runs one ```bash code block; you will see its output."
)
CHECK_TIMEOUT_S = 5


@dataclasses.dataclass(frozen=True)
class ChecksStep:
    """One command: the fraction of checks holding after it, and the best before it."""

    fraction: float
    best_before: float
    valid: bool = True


@dataclasses.dataclass(frozen=True)
class ChecksEpisode:
    best_fraction: float
    commands: int


@dataclasses.dataclass(frozen=True)
class ChecksProgressReward:
    """``max(0, fraction - best_before)``, minus ``invalid_penalty`` for a rejected message."""

    invalid_penalty: float = 0.05

    def __call__(self, step: ChecksStep) -> float:
        if not step.valid:
            return -self.invalid_penalty
        return max(0.0, step.fraction - step.best_before)


def checker_script(task: ShellTask) -> str:
    """One shell script that prints 1 or 0 per check, each check under its own time limit."""
    lines = [
        f"if timeout {CHECK_TIMEOUT_S} bash -c {shlex.quote(check.command)} >/dev/null 2>&1; "
        "then echo 1; else echo 0; fi"
        for check in task.checks
    ]
    return "\n".join(lines)


class ShellEnv(SandboxEnv[ChecksStep, ChecksEpisode]):
    """Reach a file-system goal with shell commands; see the module docstring."""

    def __init__(
        self,
        *,
        sandbox_pool: SandboxPool | None = None,
        tasks: Sequence[ShellTask] | None = None,
        task_file: str | None = None,
        step_reward: Callable[[ChecksStep], float] | None = None,
        terminal_reward: Callable[[ChecksEpisode], float] | None = None,
        **options: Unpack[SandboxOptions],
    ):
        super().__init__(
            step_reward=step_reward or ChecksProgressReward(),
            terminal_reward=terminal_reward,
            sandbox_pool=sandbox_pool,
            **options,
        )
        self.tasks = task_set(ShellTask, tasks, task_file, "shell")
        self._task = self.tasks[0]
        self._best = 0.0

    @property
    def task(self) -> ShellTask:
        """The task of the current (or last) episode."""
        return self._task

    def _open_program(self, options: dict[str, Any]) -> Program[Opening]:
        self._task = choose(self.tasks, options, self.np_random)
        self._best = 0.0
        if self._task.setup:
            result = yield from shell(self._task.setup, self.command_timeout_s)
            if not result.ok:
                raise InfraError(f"setup of task {self._task.id} failed: {result}")
        return Opening(self._task.id, (system(SYSTEM_PROMPT), user(self._task.prompt)))

    def _turn_program(self, action: str) -> Program[Turn[ChecksStep]]:
        command = extract_code(action, languages=("bash", "sh", "shell", "console"))
        run = yield from self.agent_command(RunShell(command, self.command_timeout_s))
        holding = yield from self.check()
        fraction = sum(holding) / len(holding)
        step = ChecksStep(fraction, self._best)
        self._best = max(self._best, fraction)
        done = all(holding)
        feedback = run.describe(self.max_feedback_chars) + (
            "\nGoal reached." if done else "\nGoal not reached yet."
        )
        error = run.problem if run.result is None else None
        if run.result is not None and not run.result.ok:
            error = f"the command exited with code {run.result.exit_code}"
        return Turn(
            (user(clip_text(feedback, self.max_feedback_chars + 100)),),
            step,
            terminated=done,
            failure="task" if error else None,
            error=error,
        )

    def check(self) -> Program[list[bool]]:
        """Which of the task's checks hold now (an unreadable checker is an infra failure)."""
        result = yield from shell(
            checker_script(self._task), CHECK_TIMEOUT_S * len(self._task.checks) + 5
        )
        marks = result.stdout.split()
        if len(marks) != len(self._task.checks) or set(marks) - {"0", "1"}:
            raise InfraError(
                f"the checker of {self._task.id} answered {describe_result(result, 400)}"
            )
        return [mark == "1" for mark in marks]

    def _rejected(self, error: str) -> ChecksStep:
        return ChecksStep(0.0, self._best, valid=False)

    def _episode(self) -> ChecksEpisode:
        return ChecksEpisode(self._best, self.turns)
