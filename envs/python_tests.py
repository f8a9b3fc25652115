"""PythonTests: write a Python function; public examples and hidden tests run in the sandbox.

Each turn the agent sends one ```python block. The env runs it with the task's calls in
the box (a fresh ``python3`` per submission, as the agent's user, each call with its own
time limit, ``pyrunner``), then judges on the host what each call returned (``pyjudge``).
The episode terminates when all hidden tests pass; the turn limit truncates it otherwise.

Public examples and hidden tests are apart, as in a benchmark (``tasksets.PythonTask``):
the prompt shows the examples with their values, and the feedback describes each failing
example (what it returned, what was expected). The hidden tests decide the reward, and the
feedback only counts them: a hidden test's expected value never reaches the agent, so no
submission can be a lookup table of values printed by an earlier one.

The expected values never enter the box, and the run's report is read as data: a value
is parsed as a plain literal and compared on the host, so neither an object that equals
everything nor a forged report passes a test.

Reward: ``ProgressReward`` pays, each step, how much the best fraction of passing hidden
tests improved, so the episode's return is the best fraction reached (1.0 = solved),
whether the episode terminated or was truncated; a rejected message (no code block...)
costs ``invalid_penalty``. No terminal reward by default.

Task set: ``envs/tasks/python_tests.jsonl`` (34 tasks, one example each), or
``tasks=``/``task_file=``.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from typing_extensions import Unpack

from rollgym.envs import pyrunner
from rollgym.envs.core import Opening, Turn
from rollgym.envs.messages import clip_text, system, user
from rollgym.envs.parsing import extract_code
from rollgym.envs.programs import Program, RunShell
from rollgym.envs.progress import ProgressEpisode, ProgressReward, ProgressStep
from rollgym.envs.pyjudge import TestReport, judge
from rollgym.envs.sandboxed import SandboxEnv, SandboxOptions
from rollgym.envs.tasksets import PythonTask, choose, task_set
from rollgym.sandboxes.base import SandboxPool

SYSTEM_PROMPT = (
    "Write the Python function described by the user. Reply with one ```python code block "
    "that defines it. Hidden tests will call it: you will see how many pass, and which of "
    "the examples fail."
)
RUNNER_COMMAND = "python3 -I -S -c " + shlex.quote(
    Path(pyrunner.__file__).read_text(encoding="utf-8")
)
MAX_FAILURES_SHOWN = 5


class PythonTestsEnv(SandboxEnv[ProgressStep, ProgressEpisode]):
    """Write a function that passes hidden tests; see the module docstring."""

    def __init__(
        self,
        *,
        sandbox_pool: SandboxPool | None = None,
        tasks: Sequence[PythonTask] | None = None,
        task_file: str | None = None,
        test_timeout_s: float = 2.0,
        step_reward: Callable[[ProgressStep], float] | None = None,
        terminal_reward: Callable[[ProgressEpisode], float] | None = None,
        **options: Unpack[SandboxOptions],
    ):
        options.setdefault("command_timeout_s", 20.0)
        super().__init__(
            step_reward=step_reward or ProgressReward(),
            terminal_reward=terminal_reward,
            sandbox_pool=sandbox_pool,
            **options,
        )
        self.tasks = task_set(PythonTask, tasks, task_file, "python_tests")
        self.test_timeout_s = test_timeout_s
        self._task = self.tasks[0]
        self._best = 0.0
        self._submissions = 0

    @property
    def task(self) -> PythonTask:
        """The task of the current (or last) episode."""
        return self._task

    def _open_program(self, options: dict[str, Any]) -> Program[Opening]:
        self._task = choose(self.tasks, options, self.np_random)
        self._best, self._submissions = 0.0, 0
        prompt = f"{self._task.prompt}\n\n```python\n{self._task.signature}\n```"
        if self._task.examples:
            shown = "\n".join(f">>> {call}\n{value}" for call, value in self._task.examples)
            prompt += f"\n\nExamples:\n{shown}"
        yield from ()  # nothing to set up in the box: each submission brings its code
        return Opening(self._task.id, (system(SYSTEM_PROMPT), user(prompt)))

    def _turn_program(self, action: str) -> Program[Turn[ProgressStep]]:
        code = extract_code(action, languages=("python", "py", "python3"))
        self._submissions += 1
        judged = (*self._task.examples, *self._task.tests)
        payload = {
            "code": code,
            "calls": [call for call, _ in judged],
            "test_timeout_s": self.test_timeout_s,
        }
        call = RunShell(RUNNER_COMMAND, self.command_timeout_s, stdin=json.dumps(payload))
        run = yield from self.agent_command(call)
        if run.result is None:
            return self._scored(TestReport(run.problem, ()), run.describe(self.max_feedback_chars))
        return self._scored(judge(run.result.stdout, judged), run.describe(400))

    def _scored(self, report: TestReport, run_text: str) -> Turn[ProgressStep]:
        total = len(self._task.tests)
        examples = report.results[: len(self._task.examples)]
        passed = sum(ok for ok, _ in report.results[len(examples) :])
        fraction = passed / total
        step = ProgressStep(fraction, self._best)
        self._best = max(self._best, fraction)
        solved = passed == total
        feedback = _feedback(report, examples, passed, self._task, run_text)
        error = None if solved else f"{passed} of {total} hidden tests passed"
        return Turn(
            (user(clip_text(feedback, self.max_feedback_chars)),),
            step,
            terminated=solved,
            failure=None if solved else "task",
            error=error,
        )

    def _rejected(self, error: str) -> ProgressStep:
        return ProgressStep(0.0, self._best, valid=False)

    def _episode(self) -> ProgressEpisode:
        return ProgressEpisode(self._best, self._submissions)


def _feedback(
    report: TestReport,
    examples: tuple[tuple[bool, str], ...],
    passed: int,
    task: PythonTask,
    run_text: str,
) -> str:
    """What the agent learns: each failing example in full, the hidden tests as a count."""
    total = len(task.tests)
    if report.error is not None and not report.results:
        detail = "" if run_text.startswith("exit code 0") else f"\n{run_text}"
        return (
            f"0 of {total} hidden tests passed: your code failed to run ({report.error}).{detail}"
        )
    hidden = (
        f"All {total} hidden tests passed."
        if passed == total
        else (f"{passed} of {total} hidden tests passed.")
    )
    if not examples:
        return hidden
    failures = [
        f"- {call} {detail}"
        for (call, _), (ok, detail) in zip(task.examples, examples, strict=True)
        if not ok
    ]
    right = len(examples) - len(failures)
    lines = [f"Examples: {right} of {len(examples)} passed.", *failures[:MAX_FAILURES_SHOWN]]
    if len(failures) > MAX_FAILURES_SHOWN:
        lines.append(f"(and {len(failures) - MAX_FAILURES_SHOWN} more)")
    return "\n".join([*lines, hidden])
