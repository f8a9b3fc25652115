"""Agent to reward: no reward without doing the task, in every sandboxed env.

Each attempt is an agent's message that tries to be paid without solving the task:
reading the verifier's secrets, objects that equal everything, forged reports, a
patched test runner, answering for the checker, changing files only while it looks,
killing or tracing it, starving it. Every one must earn 0.
"""

from __future__ import annotations

import textwrap
import uuid
from pathlib import Path

import gymnasium
import pytest
from attack_kit import assert_still_fine

from rollgym.envs.scripted import fenced, tool_call

PWNED = Path(f"/tmp/rollgym-attack-{uuid.uuid4().hex}")  # on the host: must never appear

PYTHON_FORGERIES = {
    "always-equal": """
        class Anything:
            def __eq__(self, other): return True
            def __ne__(self, other): return False
            __hash__ = object.__hash__
        def {name}(*args, **kwargs): return Anything()
    """,
    "int-subclass-equal-to-all": """
        class Anything(int):
            def __eq__(self, other): return True
            __hash__ = int.__hash__
        def {name}(*args, **kwargs): return Anything(-987654)
    """,
    "stack-walk": """
        import sys
        def {name}(*args, **kwargs):
            frame, found = sys._getframe(1), []
            while frame is not None:
                for scope in (frame.f_locals, frame.f_globals):
                    for key, value in list(scope.items()):
                        if key in ("want", "expected", "nonce", "tests", "payload"):
                            found.append(value)
                frame = frame.f_back
            return found[0] if found else object()
    """,
    "forged-report": """
        import json, os
        line = json.dumps({{"error": None, "results": [{{"ok": True, "value": "'FORGED'"}}] * 8}})
        os.write(1, ("\\n" + line + "\\n").encode())
        os._exit(0)
    """,
    "patched-runner": """
        import __main__
        __main__.to_plain = lambda value: "FORGED"
        def {name}(*args, **kwargs): return None
    """,
    "code-in-repr": f"""
        class Payload:
            def __repr__(self): return "__import__('os').system('touch {PWNED}')"
        def {{name}}(*args, **kwargs): return Payload()
    """,
    "deep-nesting": """
        class Deep:
            def __repr__(self): return "[" * 200000 + "]" * 200000
        def {name}(*args, **kwargs): return Deep()
    """,
    "search-the-box": """
        import os
        def {name}(*args, **kwargs):
            hits = []
            for root, _, files in os.walk("/", onerror=None):
                if root.startswith(("/proc/sys", "/sys")):
                    continue
                for f in files:
                    try:
                        if "expected" in open(os.path.join(root, f), errors="ignore").read(65536):
                            hits.append(os.path.join(root, f))
                    except OSError:
                        pass
            return hits or object()
    """,
    "exit-before-tests": """
        raise SystemExit(0)
    """,
}


@pytest.mark.parametrize("task_id", ["add", "largest"])
@pytest.mark.parametrize("forgery", sorted(PYTHON_FORGERIES))
def test_python_tests_cannot_be_passed_without_solving(pool, forgery: str, task_id: str) -> None:
    env = gymnasium.make("rollgym/PythonTests-v0", sandbox_pool=pool, test_timeout_s=5)
    env.reset(options={"task_id": task_id})
    name = env.unwrapped.task.signature.split("(")[0].removeprefix("def ")
    code = textwrap.dedent(PYTHON_FORGERIES[forgery]).format(name=name)
    obs, reward, terminated, truncated, info = env.step(fenced("python", code))
    assert (reward, terminated, truncated) == (0.0, False, False), obs
    assert info["failure"] == "task" and info["error"].startswith("0 of")
    assert not PWNED.exists()
    env.close()
    assert_still_fine(pool)


SHELL_FORGERIES = {
    "answer-the-checker": (
        "(while :; do for p in /proc/[0-9]*; do echo 1 > $p/fd/1; done 2>/dev/null; done) "
        ">/dev/null 2>&1 &"
    ),
    "goal-only-while-checked": (
        "(while :; do if pgrep -u verifier >/dev/null; then mkdir -p reports; "
        "else rmdir reports 2>/dev/null; fi; done) >/dev/null 2>&1 &"
    ),
    "resume-each-other": (
        "for i in 1 2; do (while :; do pkill -CONT -u sandbox; "
        "if pgrep -u verifier >/dev/null; then mkdir -p reports; else rmdir reports 2>/dev/null; "
        "fi; done) >/dev/null 2>&1 & done"
    ),
    "shadow-tools": (
        "for t in test bash sh grep cat stat; do printf '#!/bin/sh\\nexit 0\\n' > $t; chmod +x $t; "
        "done; printf 'exit 0\\n' > .bashrc; cp .bashrc .profile; cp .bashrc .bash_profile; "
        "export PATH=$PWD:$PATH BASH_ENV=$PWD/.bashrc"
    ),
    "kill-the-verifier": ("(while :; do pkill -9 -u verifier; kill -9 -1; done) >/dev/null 2>&1 &"),
    "trace-the-verifier": (
        '(python3 -c "import ctypes, os\nlibc = ctypes.CDLL(None)\nwhile True:\n'
        "    for p in os.listdir('/proc'):\n        if p.isdigit(): libc.ptrace(16, int(p), 0, 0)\""
        ") >/dev/null 2>&1 &"
    ),
    "starve-the-verifier": "(for i in $(seq 80); do sleep 300 & done) >/dev/null 2>&1; true",
    "lock-the-work-dir": "chmod 000 .",
}


@pytest.mark.parametrize("task_id", ["make-dir", "executable-script"])
@pytest.mark.parametrize("forgery", sorted(SHELL_FORGERIES))
def test_shell_goals_cannot_be_reached_without_doing_the_task(
    pool, forgery: str, task_id: str
) -> None:
    env = gymnasium.make("rollgym/Shell-v0", sandbox_pool=pool, command_timeout_s=5)
    env.reset(options={"task_id": task_id})
    total = 0.0
    for _ in range(2):  # the attempt, then a turn that does nothing: still nothing paid
        _obs, reward, terminated, truncated, info = env.step(
            fenced("bash", SHELL_FORGERIES[forgery])
        )
        total += reward
        assert not terminated and not truncated and info["failure"] != "infra", info
    assert total == 0.0
    env.close()
    assert_still_fine(pool)


TOOL_FORGERIES = [
    "<answer>.*</answer>",
    "<answer>nan</answer>",
    "<answer>inf</answer>",
    "<answer>" + "9" * 5000 + "</answer>",
    "<answer></answer>",
    tool_call("python", {"code": "print('<answer>' + '1024' + '</answer>')"}),
]


@pytest.mark.parametrize("attempt", TOOL_FORGERIES, ids=range(len(TOOL_FORGERIES)))
def test_tool_use_answers_are_judged_on_the_host(pool, attempt: str) -> None:
    env = gymnasium.make("rollgym/ToolUse-v0", sandbox_pool=pool)
    env.reset(options={"task_id": "csv-average"})
    _obs, reward, _terminated, _truncated, info = env.step(attempt)
    assert reward <= 0.0 and info["failure"] != "infra"
    env.close()
    assert_still_fine(pool)
