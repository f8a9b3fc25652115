"""The host's side of PythonTests: judge what the agent's code returned, as data.

The subject (``pyrunner``) runs in the box as the agent and reports, for each test call,
the ``repr`` of what it returned. That report is the agent's to write, so it is only
data: here, on the host and out of the agent's reach, each value is parsed as a plain
Python literal (``ast.literal_eval``: builtins only, no code runs) and compared with the
task's expected literal. Whatever the agent's code does in its own interpreter (objects
equal to everything, a patched runner, a forged report), a test passes only if the value
it reports *is* the expected value; the expected values never enter the box.

The report is read under bounds (``envs.untrusted``): a line nested too deep to parse, or
a value longer than ``pyrunner.VALUE_CHARS``, fails as the agent's, never as an exception
of the host's (which would count as an infrastructure failure the agent chose).
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Sequence
from typing import Any

from rollgym.envs.pyrunner import VALUE_CHARS
from rollgym.envs.untrusted import Untrusted, load_json

DETAIL_CHARS = 200
NO_REPORT = "the program stopped the test run before it finished"


@dataclasses.dataclass(frozen=True)
class TestReport:
    """What the run came to: a load error, or one (passed, detail) per test."""

    error: str | None
    results: tuple[tuple[bool, str], ...]

    @property
    def passed(self) -> int:
        return sum(ok for ok, _ in self.results)


def judge(stdout: str, tests: Sequence[tuple[str, str]]) -> TestReport:
    """The verdict on the subject's ``stdout`` for ``tests`` (``(call, expected)`` pairs)."""
    report = _last_report(stdout)
    if report is None:
        return TestReport(NO_REPORT, ())
    error, results = report.get("error"), report.get("results")
    if error is not None:
        return TestReport(str(error)[:DETAIL_CHARS], ())
    if not isinstance(results, list) or len(results) != len(tests):
        return TestReport(NO_REPORT, ())
    verdicts = (_verdict(got, expected) for got, (_, expected) in zip(results, tests, strict=True))
    return TestReport(None, tuple(verdicts))


def _last_report(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        try:
            report = load_json(line)
        except Untrusted:
            continue
        if isinstance(report, dict) and "results" in report:
            return report
    return None


def _verdict(result: object, expected: str) -> tuple[bool, str]:
    if not isinstance(result, dict):
        return False, "reported nothing"
    text = result.get("value")
    if not isinstance(text, str):
        return False, str(result.get("error", "reported nothing"))[:DETAIL_CHARS]
    shown = text[:DETAIL_CHARS]
    if len(text) > VALUE_CHARS:
        return False, f"returned a value of {len(text)} characters, too long to judge"
    try:
        got = ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, f"returned {shown}, which is not a plain Python value"
    return bool(got == ast.literal_eval(expected)), f"returned {shown}, expected {expected}"
