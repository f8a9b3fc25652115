"""Shell: bring the sandbox's work dir to a goal state with shell commands.

Each turn the agent sends one ```bash block; the env runs it in the box (``bash -c`` in
the work dir, a time limit per command) and shows its exit code and output. After every
command the box's verifier runs the task's checks (shell tests, each with its own time
limit) and the episode terminates once all of them hold. A task's checks are written so
that none holds before the agent acts.

The checks are out of the agent's reach (``Sandbox.verify``): they run as another user
with every agent process frozen, and only their exit codes count, so nothing the agent
leaves running can answer for them, swap a file while they look or forge their output.
A check that needs a program's output gets it from a probe the agent's user runs first.

Reward: ``ProgressReward`` pays, each step, how much the best fraction of holding checks
improved (the return is the best fraction reached, 1.0 = goal reached); a rejected
message costs ``invalid_penalty``. No terminal reward by default.

Task set: ``envs/tasks/shell.jsonl`` (24 tasks), or ``tasks=``/``task_file=``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from typing_extensions import Unpack

from rollgym.envs.core import Opening, Turn
from rollgym.envs.errors import InfraError
from rollgym.envs.messages import clip_text, system, user
from rollgym.envs.parsing import extract_code
from rollgym.envs.programs import Program, RunShell, shell, verify
from rollgym.envs.progress import ProgressEpisode, ProgressReward, ProgressStep
from rollgym.envs.sandboxed import SandboxEnv, SandboxOptions
from rollgym.envs.tasksets import ShellTask, choose, task_set
from rollgym.sandboxes.base import Check, SandboxPool

SYSTEM_PROMPT = (
    "You are in a Linux shell, in your working directory. Reach the goal the user describes. "
    "Each reply runs one ```bash code block; you will see its output."
)
CHECK_TIMEOUT_S = 5


class ShellEnv(SandboxEnv[ProgressStep, ProgressEpisode]):
    """Reach a file-system goal with shell commands; see the module docstring."""

    def __init__(
        self,
        *,
        sandbox_pool: SandboxPool | None = None,
        tasks: Sequence[ShellTask] | None = None,
        task_file: str | None = None,
        step_reward: Callable[[ProgressStep], float] | None = None,
        terminal_reward: Callable[[ProgressEpisode], float] | None = None,
        **options: Unpack[SandboxOptions],
    ):
        super().__init__(
            step_reward=step_reward or ProgressReward(),
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

    def _turn_program(self, action: str) -> Program[Turn[ProgressStep]]:
        command = extract_code(action, languages=("bash", "sh", "shell", "console"))
        run = yield from self.agent_command(RunShell(command, self.command_timeout_s))
        holding = yield from self.check()
        fraction = sum(holding) / len(holding)
        step = ProgressStep(fraction, self._best)
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

    def check(self) -> Program[tuple[bool, ...]]:
        """Which of the task's checks hold now, as the box's verifier sees it."""
        checks = []
        for check in self._task.checks:
            data = ""
            if check.probe is not None:  # the agent's program, run as the agent: its output is data
                run = yield from self.agent_command(RunShell(check.probe, CHECK_TIMEOUT_S))
                data = run.result.stdout if run.result is not None else ""
            checks.append(Check(check.command, data, CHECK_TIMEOUT_S))
        return (yield from verify(tuple(checks)))

    def _rejected(self, error: str) -> ProgressStep:
        return ProgressStep(0.0, self._best, valid=False)

    def _episode(self) -> ProgressEpisode:
        return ProgressEpisode(self._best, self.turns)
