"""Agent to failure kind: whatever the agent does to its box is a task failure of its
episode, never an infrastructure failure it could use to drop a losing episode."""

from __future__ import annotations

import gymnasium
import pytest
from attack_kit import BOX, assert_still_fine, quiet_pool

from rollgym.envs.scripted import fenced, tool_call

HOG = 'python3 -c "x = bytearray(1 << 30)"'
SMALL_HOGS = (  # smaller than the executor, and unkillable-looking: aims the OOM killer at it
    "for i in $(seq 40); do python3 -c \"import time; open('/proc/self/oom_score_adj', 'w')"
    ".write('0'); b = bytearray(6 << 20); b[::4096] = b'x' * len(b[::4096]); "
    'time.sleep(60)" & done; sleep 30'
)

SHELL_ATTEMPTS = {
    "memory bomb": HOG,
    "memory bomb aimed at the executor": SMALL_HOGS,
    "fill the memory with files": "head -c 200M /dev/zero > /dev/shm/f; head -c 200M /dev/zero > f",
    "kill the executor": "kill -9 $(pgrep -u root -x python3)",
    "SIGTERM to init": "kill -TERM 1",
    "kill everything": "kill -9 -1",
    "fill the work dir": "dd if=/dev/zero of=big bs=1M count=1000; dd if=/dev/zero of=/tmp/big bs=1M",
    "fork bomb": "bomb() { bomb | bomb & }; bomb; sleep 20",
    "processes left to starve the checks": "for i in $(seq 80); do sleep 300 & done",
    "output flood": "yes flood | head -c 200000000; head -c 50000000 /dev/urandom",
    "non-UTF-8 names and output": "touch $(printf 'bad\\xff\\xfe'); ls; printf '\\xc3\\x28\\xed\\xa0\\x80'",
    "trace its own command": (
        'python3 -c "import ctypes, os, time\nlibc = ctypes.CDLL(None)\nwhile True:\n'
        "    for p in os.listdir('/proc'):\n        if p.isdigit(): libc.ptrace(16, int(p), 0, 0)\""
        " >/dev/null 2>&1 & sleep 1; sleep 2"
    ),
    "a FIFO where the checks look": "mkfifo reports",
    "lock the work dir": "chmod 000 .",
}


@pytest.fixture(scope="module")
def tight_pool():
    """One box whose limits the attempts reach quickly."""
    with quiet_pool(size=1, box=BOX.with_overrides(pids_limit=64)) as pool:
        yield pool


@pytest.mark.parametrize("attempt", sorted(SHELL_ATTEMPTS))
def test_what_an_agent_does_to_its_box_is_a_task_failure(tight_pool, attempt: str) -> None:
    env = gymnasium.make("rollgym/Shell-v0", sandbox_pool=tight_pool, command_timeout_s=10)
    env.reset(options={"task_id": "make-dir"})
    obs, reward, _terminated, truncated, info = env.step(fenced("bash", SHELL_ATTEMPTS[attempt]))
    assert info["failure"] in (None, "task"), info["error"]
    assert not truncated and reward <= 0.0
    text = obs[0]["content"]
    assert len(text) < 3000 and "\x00" not in text
    # the episode goes on: the next message is judged like any other
    obs, reward, _terminated, truncated, info = env.step(fenced("bash", "echo next"))
    assert info["failure"] in (None, "task") and not truncated
    env.close()
    assert_still_fine(tight_pool)


TOOL_ATTEMPTS = {
    "read a FIFO": [
        tool_call("python", {"code": "import os; os.mkfifo('pipe')"}),
        tool_call("read_file", {"path": "pipe"}),
    ],
    "write into a FIFO": [
        tool_call("python", {"code": "import os; os.mkfifo('pipe')"}),
        tool_call("write_file", {"path": "pipe", "content": "x"}),
    ],
    "read a device": [tool_call("read_file", {"path": "/dev/zero"})],
    "NUL in a path": [tool_call("read_file", {"path": "a\u0000b"})],
    "NUL in a written path": [tool_call("write_file", {"path": "a\u0000b", "content": "x"})],
    "lone surrogate in a path": [
        '<tool_call>{"name": "read_file", "arguments": {"path": "\\ud800"}}</tool_call>'
    ],
    "read the executor's socket": [tool_call("read_file", {"path": "/run/rollgym/executor.sock"})],
    "read through a link to the host folder": [
        tool_call("python", {"code": "import os; os.symlink('/run/rollgym', 'host')"}),
        tool_call("list_files", {"path": "host"}),
        tool_call("read_file", {"path": "host/executor.sock"}),
    ],
    "write on a full disk": [
        tool_call("python", {"code": "open('fill', 'wb').write(bytes(200 << 20))"}),
        tool_call("write_file", {"path": "more.txt", "content": "x" * 100000}),
    ],
    "python memory bomb": [tool_call("python", {"code": "hog = bytearray(1 << 30)"})],
    "python os._exit": [tool_call("python", {"code": "import os; os._exit(3)"})],
    "python segfault": [tool_call("python", {"code": "import ctypes; ctypes.string_at(0)"})],
    "python output flood": [tool_call("python", {"code": "print('x' * 300_000_000)"})],
}


@pytest.mark.parametrize("attempt", sorted(TOOL_ATTEMPTS))
def test_a_tool_call_that_breaks_something_is_a_task_failure(tight_pool, attempt: str) -> None:
    env = gymnasium.make("rollgym/ToolUse-v0", sandbox_pool=tight_pool, command_timeout_s=10)
    env.reset(options={"task_id": "power-of-two"})
    for action in TOOL_ATTEMPTS[attempt]:
        obs, _reward, _terminated, truncated, info = env.step(action)
        assert info["failure"] in (None, "task"), info["error"]
        assert not truncated
    obs, *_, info = env.step(tool_call("python", {"code": "print('next')"}))
    assert info["failure"] is None and obs[0]["content"] == "next\n"
    env.close()
    assert_still_fine(tight_pool)


def test_a_python_tests_submission_that_breaks_the_box_is_a_task_failure(tight_pool) -> None:
    env = gymnasium.make("rollgym/PythonTests-v0", sandbox_pool=tight_pool)
    env.reset(options={"task_id": "add"})
    for code in (
        "x = bytearray(1 << 30)",
        "import os; [os.fork() for _ in range(10)]",
        "open('/tmp/fill', 'wb').write(bytes(200 << 20))\ndef add(a, b): return a + b",
    ):
        _, _reward, _terminated, truncated, info = env.step(fenced("python", code))
        assert info["failure"] in (None, "task") and not truncated, info["error"]
    env.close()
    assert_still_fine(tight_pool)


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


COMPUTE_ATTEMPTS = {
    "invalid JSON in the call": '<tool_call>{"name": "python", "arguments": {"code": }}</tool_call>',
    "unbalanced call tags": '<tool_call>{"name": "python", "arguments": {"code": "print(1)"}}',
    "an unknown tool": tool_call("shell", {"command": "id"}),
    "a call without its code": tool_call("python", {}),
    "code that is not a string": tool_call("python", {"code": 42}),
    "a call and an answer at once": tool_call("python", {"code": "print(1)"})
    + "<answer>1</answer>",
    "arguments nested 5,000 deep": (
        '<tool_call>{"name": "python", "arguments": {"code": ' + _nested(5000) + "}}</tool_call>"
    ),
    "a call nested 100,000 deep": "<tool_call>" + _nested(100_000) + "</tool_call>",
    "code that raises": tool_call("python", {"code": "1 / 0"}),
    "code that never ends": tool_call("python", {"code": "while True: pass"}),
    "code that sleeps past the limit": tool_call("python", {"code": "import time; time.sleep(60)"}),
    "huge output": tool_call("python", {"code": "print('x' * 300_000_000)"}),
    "binary output": tool_call(
        "python", {"code": "import sys; sys.stdout.buffer.write(bytes(range(256)))"}
    ),
    "code that exits the interpreter": tool_call("python", {"code": "raise SystemExit(3)"}),
    "code that kills its interpreter": tool_call(
        "python", {"code": "import os; os.kill(os.getpid(), 9)"}
    ),
    "code that recurses forever": tool_call("python", {"code": "def f(): f()\nf()"}),
    "a memory hog": tool_call("python", {"code": "hog = bytearray(1 << 30)"}),
    "a NUL in the code": tool_call("python", {"code": "print('a\u0000b')"}),
    "a lone surrogate in the code": '<tool_call>{"name": "python", "arguments": {"code": "\\ud800"}}</tool_call>',
    "a message too long": "<answer>" + "9" * 40_000 + "</answer>",
}


@pytest.mark.parametrize("attempt", sorted(COMPUTE_ATTEMPTS))
def test_whatever_the_compute_agent_writes_is_its_own_task_failure(tight_pool, attempt) -> None:
    """Every way the tool task's agent can fail is scored as the episode's failure, never an
    excluded infrastructure one: the episode goes on, and the right answer still pays."""
    env = gymnasium.make(
        "rollgym/Compute-v0", sandbox_pool=tight_pool, kinds=["mul"], command_timeout_s=5
    )
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(COMPUTE_ATTEMPTS[attempt])
    assert info["failure"] in (None, "task"), info["error"]
    assert not truncated and not terminated and reward <= 0.0
    text = obs[0]["content"]
    assert len(text) < 3000 and "\x00" not in text
    # the episode goes on: the task is still there to solve, and solving it pays
    solved = env.unwrapped.solved
    obs, *_, info = env.step(tool_call("python", {"code": solved.codes[0]}))
    assert info["failure"] is None and obs[0]["content"] == solved.outputs[0]
    _, reward, terminated, _, info = env.step(f"<answer>{solved.task.answer}</answer>")
    assert terminated and reward == pytest.approx(1.0) and info["failure"] is None
    env.close()
    assert_still_fine(tight_pool)
