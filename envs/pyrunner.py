"""The subject side of PythonTests: run the agent's code and its test calls *inside the box*.

Usage in the box, as the agent's user: ``python3 -I -S -c "<this file's source>"`` with a
JSON payload on stdin: the agent's code, the tests' *calls* (never their expected values),
and a per-call time limit. It runs the code with its output captured, evaluates each call
under its own time limit (once one times out, the rest are skipped), and prints one line,
a JSON report of what each call *returned*::

    {"error": null | "SyntaxError: ...",
     "results": [{"value": "<repr of a plain literal>"} | {"error": "raised ..."}, ...]}

This process is the agent's: its code runs in this interpreter and may rewrite the
report, so the report is only ever read as data. The env parses each value as a Python
literal on the host (``ast.literal_eval``) and compares it with the expected value there:
an object whose ``__eq__`` always says yes never reaches a comparison, and there is no
secret here to steal. Values are turned into plain builtins first (``to_plain``), so a
subclass of ``int`` or ``dict`` is judged by its value.
"""

from __future__ import annotations

import contextlib
import io
import json
import signal
import sys
from typing import Any

DETAIL_CHARS = 200
VALUE_CHARS = 10_000
PLAIN_SCALARS = (bool, int, float, complex, str, bytes)


class TestTimedOut(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise TestTimedOut("took too long")


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:DETAIL_CHARS]


def to_plain(value: Any) -> Any:
    """``value`` rebuilt from builtin types only (so that its repr is a literal), as far
    as it is made of them; anything else is left as it is (its repr will not parse)."""
    if value is None:
        return None
    scalar: type[Any]
    for scalar in PLAIN_SCALARS:
        if isinstance(value, scalar):
            return scalar(value)
    if isinstance(value, dict):
        return {to_plain(k): to_plain(v) for k, v in value.items()}
    container: type[Any]
    for container in (list, tuple, set, frozenset):
        if isinstance(value, container):
            return container(to_plain(item) for item in value)
    return value


def _run_call(call: str, namespace: dict[str, Any], limit_s: float) -> dict[str, Any]:
    sink = io.StringIO()
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            value = eval(call, namespace)
            text = repr(to_plain(value))
        if len(text) > VALUE_CHARS:
            return {"error": f"returned a value of {len(text)} characters"}
        return {"value": text}
    except TestTimedOut:
        return {"error": f"timed out after {limit_s:g} s", "timeout": True}
    except BaseException as exc:  # the code under test may raise anything, SystemExit too
        return {"error": f"raised {_describe(exc)}"}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def main() -> None:
    stdout = sys.stdout
    payload = json.load(sys.stdin)
    limit_s = payload["test_timeout_s"]

    def report(error: str | None, results: list[dict[str, Any]]) -> None:
        stdout.write("\n" + json.dumps({"error": error, "results": results}) + "\n")
        stdout.flush()

    signal.signal(signal.SIGALRM, _alarm)
    namespace: dict[str, Any] = {"__name__": "solution"}
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            exec(compile(payload["code"], "solution.py", "exec"), namespace)
    except BaseException as exc:  # a syntax error, or whatever the module-level code raised
        report(_describe(exc), [])
        return
    results: list[dict[str, Any]] = []
    timed_out = False
    for call in payload["calls"]:
        if timed_out:
            results.append({"error": "skipped: an earlier test timed out"})
            continue
        results.append(_run_call(call, namespace, limit_s))
        timed_out = "timeout" in results[-1]
    report(None, results)


if __name__ == "__main__":
    main()
