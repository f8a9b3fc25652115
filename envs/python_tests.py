"""PythonTests: write a Python function; hidden tests run in the sandbox.

Each turn the agent sends one ```python block. The env runs it against the task's hidden
tests in the box (a fresh ``python3`` per submission, each test with its own time limit)
and answers with how many passed and what failed. The episode terminates when all tests
pass; the turn limit truncates it otherwise.

Reward: ``TestsProgressReward`` pays, each step, how much the best fraction of passing
tests improved, so the episode's return is the best fraction reached (1.0 = solved),
whether the episode terminated or was truncated; a rejected message (no code block...)
costs ``invalid_penalty``. No terminal reward by default.

Task set: ``envs/tasks/python_tests.jsonl`` (34 tasks), or ``tasks=``/``task_file=``.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
import secrets
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from typing_extensions import Unpack

from rollgym.envs import pyrunner
from rollgym.envs.core import Opening, Turn
from rollgym.envs.messages import clip_text, system, user
from rollgym.envs.parsing import extract_code
from rollgym.envs.programs import Program, RunShell, write_file
from rollgym.envs.sandboxed import SandboxEnv, SandboxOptions
from rollgym.envs.tasksets import PythonTask, choose, task_set
from rollgym.sandboxes.base import TMP_DIR, SandboxPool

SYSTEM_PROMPT = (
    "Write the Python function described by the user. Reply with one ```python code block "
    "that defines it. Hidden tests will call it; you will see which ones fail."
)
RUNNER_SOURCE = Path(pyrunner.__file__).read_text(encoding="utf-8")
MAX_FAILURES_SHOWN = 5


@dataclasses.dataclass(frozen=True)
class TestsStep:
    """One submission: the fraction of tests it passed and the best fraction before it."""

    fraction: float
    best_before: float
    valid: bool = True


@dataclasses.dataclass(frozen=True)
class TestsEpisode:
    best_fraction: float
    submissions: int


@dataclasses.dataclass(frozen=True)
class TestsProgressReward:
    """``max(0, fraction - best_before)``, minus ``invalid_penalty`` for a rejected message."""

    invalid_penalty: float = 0.05

    def __call__(self, step: TestsStep) -> float:
        if not step.valid:
            return -self.invalid_penalty
        return max(0.0, step.fraction - step.best_before)


@dataclasses.dataclass(frozen=True)
class TestReport:
    """What the runner found: a load error, or one (passed, detail) per test."""

    error: str | None
    results: tuple[tuple[bool, str], ...]

    @property
    def passed(self) -> int:
        return sum(ok for ok, _ in self.results)


class PythonTestsEnv(SandboxEnv[TestsStep, TestsEpisode]):
    """Write a function that passes hidden tests; see the module docstring."""

    def __init__(
        self,
        *,
        sandbox_pool: SandboxPool | None = None,
        tasks: Sequence[PythonTask] | None = None,
        task_file: str | None = None,
        test_timeout_s: float = 2.0,
        step_reward: Callable[[TestsStep], float] | None = None,
        terminal_reward: Callable[[TestsEpisode], float] | None = None,
        **options: Unpack[SandboxOptions],
    ):
        options.setdefault("command_timeout_s", 20.0)
        super().__init__(
            step_reward=step_reward or TestsProgressReward(),
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
        yield from ()  # nothing to set up in the box: each submission brings its code
        return Opening(self._task.id, (system(SYSTEM_PROMPT), user(prompt)))

    def _turn_program(self, action: str) -> Program[Turn[TestsStep]]:
        code = extract_code(action, languages=("python", "py", "python3"))
        self._submissions += 1
        payload_name = f"rollgym-tests-{self._submissions}.json"
        nonce = secrets.token_hex(16)
        payload = {
            "code": code,
            "tests": [list(test) for test in self._task.tests],
            "test_timeout_s": self.test_timeout_s,
            "nonce": nonce,
        }
        yield from write_file(posixpath.join(TMP_DIR, payload_name), json.dumps(payload))
        command = f'python3 -I -S -c {shlex.quote(RUNNER_SOURCE)} "$TMPDIR/{payload_name}"'
        run = yield from self.agent_command(RunShell(command, self.command_timeout_s))
        if run.result is None:
            return self._scored(TestReport(run.problem, ()), run.describe(self.max_feedback_chars))
        return self._scored(_parse_report(run.result.stdout, nonce), run.describe(400))

    def _scored(self, report: TestReport, run_text: str) -> Turn[TestsStep]:
        total = len(self._task.tests)
        fraction = report.passed / total
        step = TestsStep(fraction, self._best)
        self._best = max(self._best, fraction)
        solved = report.passed == total
        feedback = _feedback(report, total, self._task, run_text)
        error = None if solved else f"{report.passed} of {total} tests passed"
        return Turn(
            (user(clip_text(feedback, self.max_feedback_chars)),),
            step,
            terminated=solved,
            failure=None if solved else "task",
            error=error,
        )

    def _rejected(self, error: str) -> TestsStep:
        return TestsStep(0.0, self._best, valid=False)

    def _episode(self) -> TestsEpisode:
        return TestsEpisode(self._best, self._submissions)


def _parse_report(stdout: str, nonce: str) -> TestReport:
    """The runner's report line, or a load error saying the run ended without one."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(nonce):
            report = json.loads(line[len(nonce) :])
            results = tuple((bool(r["ok"]), str(r["detail"])) for r in report["results"])
            return TestReport(report["error"], results)
    return TestReport("the program stopped the test run before it finished", ())


def _feedback(report: TestReport, total: int, task: PythonTask, run_text: str) -> str:
    if report.error is not None and not report.results:
        detail = "" if run_text.startswith("exit code 0") else f"\n{run_text}"
        return f"0 of {total} tests passed: your code failed to run ({report.error}).{detail}"
    if report.passed == total:
        return f"All {total} tests passed."
    failures = [
        f"- {call} {detail}"
        for (call, _), (ok, detail) in zip(task.tests, report.results, strict=True)
        if not ok
    ]
    shown = "\n".join(failures[:MAX_FAILURES_SHOWN])
    more = len(failures) - MAX_FAILURES_SHOWN
    tail = f"\n(and {more} more)" if more > 0 else ""
    return f"{report.passed} of {total} tests passed. Failures:\n{shown}{tail}"
