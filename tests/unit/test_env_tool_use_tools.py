"""ToolUse's ``tools=``: a subset of its tools, declared another way, shown as given and run
by ToolUse's own implementation (on the fake pool here)."""

from __future__ import annotations

from typing import Any

import gymnasium
import pytest

from rollgym.envs.errors import EnvLoadError
from rollgym.envs.scripted import tool_call
from rollgym.envs.tasksets import ToolCallSpec, ToolTask
from rollgym.sandboxes.config import PoolConfig
from rollgym.sandboxes.fake import FakeSandboxPool

# What transformers' get_json_schema makes of a documented ``def python(self, code: str) -> str``
PYTHON: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "python",
        "description": "Run Python code; returns what it prints.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "the program"}},
            "required": ["code"],
        },
    },
    "return": {"type": "string", "description": "What the program printed."},
}
TASK = ToolTask(
    id="mul",
    question="What is 12 * 34?",
    answer="408",
    solution=(ToolCallSpec(name="python", arguments={"code": "print(12 * 34)"}),),
)


@pytest.fixture(scope="module")
def pool():
    with FakeSandboxPool(PoolConfig(size=1, health_interval_s=0)) as pool:
        yield pool


def test_declared_tools_are_shown_as_given_and_run_by_tool_use(pool) -> None:
    env = gymnasium.make("rollgym/ToolUse-v0", sandbox_pool=pool, tasks=[TASK], tools=[PYTHON])
    assert env.unwrapped.tools == [PYTHON]
    env.reset(seed=0)
    obs, _, terminated, _, _ = env.step(tool_call("python", {"code": "print(12 * 34)"}))
    assert obs[0] == {"role": "tool", "content": "408\n"} and not terminated
    obs, reward, terminated, _, _ = env.step("<answer>408</answer>")
    assert terminated and reward == 1.0
    env.close()


def test_a_tool_not_offered_is_unknown_to_the_agent(pool) -> None:
    env = gymnasium.make("rollgym/ToolUse-v0", sandbox_pool=pool, tasks=[TASK], tools=[PYTHON])
    env.reset(seed=0)
    obs, reward, *_, info = env.step(tool_call("read_file", {"path": "x"}))
    assert "unknown tool 'read_file'. Available tools: python" in obs[0]["content"]
    assert reward < 0 and info["failure"] == "task"
    env.close()


def _with(**function: Any) -> dict[str, Any]:
    return {"type": "function", "function": {**PYTHON["function"], **function}}


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        (_with(name="shell"), "not one of"),
        (_with(parameters={"type": "object", "properties": {"src": {"type": "string"}}}), "src"),
        (_with(parameters={"type": "object", "properties": {"code": {"type": 3}}}), "JSON Schema"),
        ({"type": "function"}, "a tool is"),
    ],
    ids=["unknown tool", "other arguments", "not a schema", "no function"],
)
def test_a_declaration_tool_use_cannot_run_is_refused(declared, message) -> None:
    from rollgym.envs.tool_use import ToolUseEnv

    with pytest.raises(EnvLoadError, match=message):
        ToolUseEnv(tasks=[TASK], tools=[declared])
