"""Bad actions: each gets the agent a clear feedback message and a defined reward, and never
kills the episode with an exception (sandboxed envs on the fake pool here; the docker tier
repeats the sandbox-side cases on real containers)."""

from __future__ import annotations

import math

import gymnasium
import pytest

from rollgym.envs.scripted import fenced, solver, tool_call
from rollgym.sandboxes.config import PoolConfig
from rollgym.sandboxes.fake import FakeSandboxPool

GARBAGE = bytes(range(256)).decode("latin-1") * 3
DEEP = "[" * 5000 + "]" * 5000  # json.loads raises RecursionError on it
BAD_ACTIONS = {
    "empty": "",
    "no code block": "I would list the files and then write the function.",
    "invalid tool-call JSON": '<tool_call>{"name": "python", "arguments": {code: "1"}}</tool_call>',
    "unknown tool": tool_call("rm_rf", {"path": "/"}),
    "huge message": "word " * 20_000,
    "huge output": fenced("bash", "yes hello | head -c 3000000"),
    "huge python output": fenced("python", "print('x' * 5_000_000)"),
    "binary garbage": GARBAGE,
    "binary garbage in code": fenced("bash", GARBAGE),
    "binary output": fenced("bash", "head -c 4000 /dev/urandom"),
    "lone surrogate": "```python\nx = '\ud800'\n```",
    "odd unicode": "‮‏؜\u200b\u200d\ufeff e\u0301 😀 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ﷽ ```python\nx = '😀'\n```",
    # What the agent's text makes the host parse, past the parsers' own limits (issue 34):
    "tool call nested 5,000 deep": (
        '<tool_call>{"name": "list_files", "arguments": {"path": ' + DEEP + "}}</tool_call>"
    ),
    "NUL in a listed path": tool_call("list_files", {"path": "a\x00b"}),
    "lone surrogate in a listed path": (
        '<tool_call>{"name": "list_files", "arguments": {"path": "\\ud800"}}</tool_call>'
    ),
    "lone surrogate in written content": (
        '<tool_call>{"name": "write_file", "arguments": {"path": "a", "content": "\\udc80"}}'
        "</tool_call>"
    ),
    "report line nested 5,000 deep": fenced(
        "python", f"import os\nos.write(1, b'\\n{DEEP}\\n')\nos._exit(0)"
    ),
}
# What the agent must be told, where the case applies to the env.
FEEDBACK = {
    ("rollgym/GuessNumber-v0", "no code block"): "exactly one number",
    ("rollgym/GuessNumber-v0", "lone surrogate"): "not valid Unicode",
    ("rollgym/PythonTests-v0", "no code block"): "No code block",
    ("rollgym/PythonTests-v0", "binary garbage in code"): "got a ```bash block",
    ("rollgym/PythonTests-v0", "lone surrogate"): "not valid Unicode",
    ("rollgym/PythonTests-v0", "huge message"): "too long",
    ("rollgym/PythonTests-v0", "huge python output"): "tests passed",
    ("rollgym/Shell-v0", "no code block"): "No code block",
    ("rollgym/Shell-v0", "binary garbage in code"): "NUL",
    ("rollgym/Shell-v0", "huge output"): "more characters cut",
    ("rollgym/Shell-v0", "binary output"): "exit code 0",
    ("rollgym/ToolUse-v0", "no code block"): "Call a tool",
    ("rollgym/ToolUse-v0", "invalid tool-call JSON"): "could not be read",
    ("rollgym/ToolUse-v0", "unknown tool"): "unknown tool 'rm_rf'",
    ("rollgym/ToolUse-v0", "huge message"): "too long",
    ("rollgym/ToolUse-v0", "tool call nested 5,000 deep"): "nested 5002 deep",
    ("rollgym/ToolUse-v0", "NUL in a listed path"): "'path' holds a NUL",
    ("rollgym/ToolUse-v0", "lone surrogate in a listed path"): "'path' holds a lone surrogate",
    ("rollgym/ToolUse-v0", "lone surrogate in written content"): "'content' holds a lone",
    ("rollgym/PythonTests-v0", "report line nested 5,000 deep"): "0 of 4 hidden tests passed",
}
ENVS = {
    "rollgym/GuessNumber-v0": "guess-9",
    "rollgym/PythonTests-v0": "fizzbuzz",
    "rollgym/Shell-v0": "hello-file",
    "rollgym/ToolUse-v0": "sum-numbers",
}
PENALTY = {"rollgym/GuessNumber-v0": -0.1}


@pytest.fixture(scope="module")
def pool():
    with FakeSandboxPool(PoolConfig(size=2, health_interval_s=0)) as pool:
        yield pool


def assert_clean_feedback(env, obs, limit: int = 4_000) -> None:
    assert obs in env.observation_space
    assert obs, "the agent must be told something"
    for message in obs:
        assert message["content"].strip()
        assert len(message["content"]) <= limit
        message["content"].encode("utf-8")  # no lone surrogates
        assert "\x00" not in message["content"]


@pytest.mark.parametrize("env_id", ENVS)
@pytest.mark.parametrize("case", BAD_ACTIONS)
def test_bad_action_gets_feedback_and_a_defined_reward(env_id: str, case: str, pool) -> None:
    kwargs = {} if env_id == "rollgym/GuessNumber-v0" else {"sandbox_pool": pool}
    env = gymnasium.make(env_id, max_episode_steps=10, **kwargs)
    obs, _ = env.reset(options={"task_id": ENVS[env_id]})
    history = list(obs)
    obs, reward, terminated, truncated, info = env.step(BAD_ACTIONS[case])
    assert_clean_feedback(env, obs)
    assert isinstance(reward, float) and math.isfinite(reward)
    assert reward <= 0.0
    assert not terminated and not truncated
    assert info["failure"] in (None, "task")
    if info["failure"] == "task":
        assert info["error"]
    expected = FEEDBACK.get((env_id, case))
    if expected is not None:
        assert expected in " ".join(m["content"] for m in obs)
    # the episode goes on: the reference solution still solves it
    history += [{"role": "assistant", "content": BAD_ACTIONS[case]}, *obs]
    for _ in range(6):
        action = solver(env)(history)
        obs, _, terminated, truncated, info = env.step(action)
        history += [{"role": "assistant", "content": action}, *obs]
        if terminated or truncated:
            break
    assert terminated and info["failure"] is None, info["error"]
    env.close()


@pytest.mark.parametrize("env_id", [e for e in ENVS if e != "rollgym/GuessNumber-v0"])
def test_rejected_messages_cost_the_documented_penalty(env_id: str, pool) -> None:
    env = gymnasium.make(env_id, sandbox_pool=pool)
    env.reset(options={"task_id": ENVS[env_id]})
    _, reward, *_, info = env.step("no code, no tools, no answer")
    assert reward == pytest.approx(-0.05)
    assert info["failure"] == "task" and info["step_reward"] == pytest.approx(-0.05)
    env.close()


def test_a_command_past_its_timeout_is_the_agents_failure_and_the_box_lives_on(pool) -> None:
    env = gymnasium.make("rollgym/Shell-v0", sandbox_pool=pool, command_timeout_s=0.5)
    env.reset(options={"task_id": "make-dir"})
    obs, reward, terminated, truncated, info = env.step(fenced("bash", "echo started; sleep 30"))
    assert "timed out after 0.5 s" in obs[0]["content"]
    assert "started" in obs[0]["content"]
    assert (reward, terminated, truncated, info["failure"]) == (0.0, False, False, "task")
    obs, reward, terminated, *_ = env.step(fenced("bash", "mkdir reports"))
    assert terminated and reward == 1.0
    env.close()


def test_a_python_tool_past_its_timeout_is_reported_to_the_agent(pool) -> None:
    env = gymnasium.make("rollgym/ToolUse-v0", sandbox_pool=pool, command_timeout_s=0.5)
    env.reset(options={"task_id": "power-of-two"})
    obs, _, _, truncated, info = env.step(tool_call("python", {"code": "while True: pass"}))
    assert obs[0]["role"] == "tool" and "timed out" in obs[0]["content"]
    assert info["failure"] == "task" and not truncated
    obs, *_ = env.step(tool_call("python", {"code": "print(2 ** 10)"}))
    assert obs[0]["content"] == "1024\n"
    env.close()
