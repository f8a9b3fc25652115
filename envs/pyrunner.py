"""The hidden-test runner of PythonTests; runs *inside the sandbox* (stdlib only).

Usage in the box: ``python3 -I -S -c "<this file's source>" PAYLOAD.json``. The payload holds
the agent's code, the tests as ``[call, expected literal]`` pairs, a per-test time limit
and a nonce. The runner reads and deletes the payload (so the code under test cannot
read the expected values from it), runs the code with its output captured, evaluates
every test with its own time limit (once one times out, the rest are skipped), and prints one line: the nonce, then a JSON report::

    {"error": null | "SyntaxError: ...", "results": [{"ok": bool, "detail": str}, ...]}

Not adversarially robust: the code under test runs in the runner's own interpreter.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import signal
import sys
from typing import Any

DETAIL_CHARS = 200


class TestTimedOut(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise TestTimedOut("took too long")


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:DETAIL_CHARS]


def _run_test(
    call: str, expected: str, namespace: dict[str, Any], limit_s: float
) -> dict[str, Any]:
    sink = io.StringIO()
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            got = eval(call, namespace)
        want = ast.literal_eval(expected)
        ok = bool(got == want)
        detail = f"returned {repr(got)[:DETAIL_CHARS]}, expected {expected}"
    except TestTimedOut:
        ok, detail = False, f"timed out after {limit_s:g} s"
    except BaseException as exc:  # the code under test may raise anything, SystemExit too
        ok, detail = False, f"raised {_describe(exc)}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return {"ok": ok, "detail": detail}


def main() -> None:
    stdout = sys.stdout
    with open(sys.argv[1], encoding="utf-8") as handle:
        payload = json.load(handle)
    os.unlink(sys.argv[1])
    nonce, limit_s = payload["nonce"], payload["test_timeout_s"]

    def report(error: str | None, results: list[dict[str, Any]]) -> None:
        stdout.write("\n" + nonce + json.dumps({"error": error, "results": results}) + "\n")
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
    for call, want in payload["tests"]:
        if timed_out:
            results.append({"ok": False, "detail": "skipped: an earlier test timed out"})
            continue
        results.append(_run_test(call, want, namespace, limit_s))
        timed_out = results[-1]["detail"].startswith("timed out")
    report(None, results)


if __name__ == "__main__":
    main()
