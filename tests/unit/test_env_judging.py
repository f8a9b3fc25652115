"""Rewards decided on the host: PythonTests' judge reads the run's report as data, and the
progress reward that Shell and PythonTests share."""

from __future__ import annotations

import json

import pytest

from rollgym.envs.progress import ProgressReward, ProgressStep
from rollgym.envs.pyjudge import NO_REPORT, judge
from rollgym.envs.pyrunner import VALUE_CHARS, to_plain

TESTS = (("f(1)", "2"), ("f(2)", "[1, 'a', None]"), ("f(3)", "{'k': (1, 2.5)}"))


def report(*values: object, error: str | None = None) -> str:
    results = [v if isinstance(v, dict) else {"value": v} for v in values]
    return "printed by the code\n" + json.dumps({"error": error, "results": results}) + "\n"


def test_values_equal_to_the_expected_literals_pass() -> None:
    verdict = judge(report("2", "[1, 'a', None]", "{'k': (1, 2.5)}"), TESTS)
    assert verdict.passed == 3 and verdict.error is None


@pytest.mark.parametrize(
    "value",
    [
        "<__main__.Anything object at 0x7f>",  # an object equal to everything never gets here
        "__import__('os').system('true')",  # no code runs on the host
        "[" * 5_000 + "]" * 5_000,
        "nan",
        "2 if True else 0",
        "",
    ],
)
def test_anything_but_a_plain_literal_fails(value: str) -> None:
    ok, detail = judge(report(value, "[]", "{}"), TESTS).results[0]
    assert not ok and "not a plain Python value" in detail


def test_the_last_report_counts_and_a_missing_one_fails_every_test() -> None:
    forged_first = report("2", "[1, 'a', None]", "{'k': (1, 2.5)}") + report("0", "0", "0")
    assert judge(forged_first, TESTS).passed == 0
    assert judge("no report at all", TESTS).error == NO_REPORT
    assert judge(report("2"), TESTS).error == NO_REPORT  # a report of the wrong length
    assert judge(report(error="SyntaxError: bad"), TESTS).error == "SyntaxError: bad"
    errors = judge(report({"error": "raised KeyError"}, {}, "x"), TESTS)
    assert [ok for ok, _ in errors.results] == [False, False, False]


def test_a_report_past_the_bounds_fails_its_tests_and_never_raises() -> None:
    """The report is the agent's to write: a line nested past the JSON parser's recursion
    limit, or a value too long to judge, is the agent's failure, not the host's crash."""
    deep = "[" * 5_000 + "]" * 5_000
    assert judge(f"\n{deep}\n", TESTS).error == NO_REPORT
    assert judge(f"{report('2', '[]', '{}')}{deep}\n", TESTS).passed == 1  # the line before it
    ok, detail = judge(report("1" * (VALUE_CHARS + 1), "[]", "{}"), TESTS).results[0]
    assert not ok and "too long to judge" in detail


def test_subclasses_of_builtins_are_judged_by_their_value() -> None:
    class Sneaky(int):
        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = int.__hash__

    assert repr(to_plain({"a": [Sneaky(5), (True, None)]})) == "{'a': [5, (True, None)]}"


def test_progress_pays_the_improvement_of_the_best_fraction() -> None:
    reward = ProgressReward(invalid_penalty=0.1)
    assert reward(ProgressStep(0.5, 0.0)) == 0.5
    assert reward(ProgressStep(0.25, 0.5)) == 0.0  # falling back costs nothing
    assert reward(ProgressStep(0.0, 0.5, valid=False)) == -0.1
