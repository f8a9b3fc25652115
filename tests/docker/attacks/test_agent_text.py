"""Agent's text to training data: what a policy writes cannot shape what it is trained on.

Two ways it could (issue 34): feedback that reveals what is judged, so that a later
submission is a lookup table of it; and text that makes the host fail (a parser past its
limits, a path the box's executor refuses), so that the episode counts as an
infrastructure failure and is excluded: an agent would choose which of its episodes count,
and veto a losing group. Both on real boxes: the feedback never carries a hidden test's
expected value, and whatever the agent writes is a task failure of its episode.
"""

from __future__ import annotations

import re
import textwrap

import gymnasium
import pytest
from attack_kit import assert_still_fine

from rollgym.envs.scripted import fenced, tool_call

# Reads the call under test from the runner's frame and answers from a table of the values
# that earlier feedback printed: the whole attack is a second submission.
LOOKUP = """
    import sys
    TABLE = {table!r}
    def {name}(*args, **kwargs):
        frame = sys._getframe(1)
        while frame is not None and not isinstance(frame.f_locals.get("call"), str):
            frame = frame.f_back
        call = frame.f_locals["call"] if frame is not None else None
        return eval(TABLE[call]) if call in TABLE else None
"""
PRINTED = re.compile(r"^- (.+?) returned .*?, expected (.+)$", re.MULTILINE)


@pytest.fixture
def make(pool):
    """``gymnasium.make`` on the pool; every env made is closed after the test, pass or fail
    (a box left acquired would stall the next test's reset)."""
    made: list[gymnasium.Env] = []

    def make(env_id: str, **kwargs: object) -> gymnasium.Env:
        made.append(gymnasium.make(env_id, sandbox_pool=pool, **kwargs))
        return made[-1]

    yield make
    for env in made:
        env.close()


@pytest.mark.parametrize("task_id", ["add", "fizzbuzz", "word-count"])
def test_python_tests_feedback_never_pays_a_lookup_table(make, pool, task_id: str) -> None:
    env = make("rollgym/PythonTests-v0", max_episode_steps=4)
    env.reset(options={"task_id": task_id})
    task = env.unwrapped.task
    name = task.signature.split("(")[0].removeprefix("def ")
    table: dict[str, str] = {}
    total = 0.0
    code = f"def {name}(*args, **kwargs):\n    return None"
    for _ in range(4):
        obs, reward, terminated, _truncated, info = env.step(fenced("python", code))
        total += reward
        assert info["failure"] != "infra"
        table.update(PRINTED.findall(obs[0]["content"]))
        code = textwrap.dedent(LOOKUP).format(table=table, name=name)
        if terminated:
            break
    assert total < 1.0, f"a lookup table of the feedback earned {total}"
    hidden = {call for call, _ in task.tests}  # judged, never echoed
    assert not hidden & set(table), f"feedback printed hidden tests' values: {table}"
    env.close()
    assert_still_fine(pool)


DEEP = "[" * 5000 + "]" * 5000
TEXT_ATTEMPTS = {
    "rollgym/ToolUse-v0": {
        "a call nested 5,000 deep": "<tool_call>" + DEEP + "</tool_call>",
        "arguments nested 5,000 deep": (
            '<tool_call>{"name": "list_files", "arguments": {"path": ' + DEEP + "}}</tool_call>"
        ),
        "NUL in a listed path": tool_call("list_files", {"path": "a\x00b"}),
        "lone surrogate in a listed path": (
            '<tool_call>{"name": "list_files", "arguments": {"path": "\\ud800"}}</tool_call>'
        ),
        "NUL in a read path": tool_call("read_file", {"path": "a\x00b"}),
        "lone surrogate in written content": (
            '<tool_call>{"name": "write_file", "arguments": {"path": "a.txt", '
            '"content": "\\udc80"}}</tool_call>'
        ),
        "NUL in python code": tool_call("python", {"code": "print('a\x00b')"}),
        "a number of 5,000 digits": (
            '<tool_call>{"name": "python", "arguments": {"code": 1' + "0" * 5000 + "}}</tool_call>"
        ),
    },
    "rollgym/GuessTool-v0": {
        "a guess nested 3,000 deep": (
            '<tool_call>{"name": "guess", "arguments": {"number": '
            + "[" * 1900
            + "]" * 1900
            + "}}</tool_call>"
        ),
        "a guess of 3,000 digits": tool_call("guess", {"number": 10**2999}),
        "a guess of 1e400": '<tool_call>{"name": "guess", "arguments": {"number": 1e400}}</tool_call>',
    },
    "rollgym/PythonTests-v0": {
        "a report line nested 5,000 deep": fenced(
            "python", f"import os\nos.write(1, b'\\n{DEEP}\\n')\nos._exit(0)"
        ),
    },
}
CASES = [(env_id, name) for env_id, attempts in TEXT_ATTEMPTS.items() for name in attempts]


@pytest.mark.parametrize(("env_id", "attempt"), CASES, ids=[f"{e}: {a}" for e, a in CASES])
def test_whatever_the_agent_writes_is_its_own_task_failure(
    make, pool, env_id: str, attempt: str
) -> None:
    """The episode is scored (a task failure with feedback), goes on, and the box is fine."""
    env = make(env_id, command_timeout_s=10)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(TEXT_ATTEMPTS[env_id][attempt])
    assert info["failure"] == "task" and info["error"], info
    assert not truncated and not terminated and reward <= 0.0
    text = obs[0]["content"]
    assert 0 < len(text) < 3000 and "\x00" not in text
    text.encode("utf-8")
    _, _, _, truncated, info = env.step("I give up.")  # the episode goes on
    assert not truncated and info["failure"] in (None, "task")
    env.close()
    assert_still_fine(pool)
