"""Scripted policies for the reference envs: the reference solver of the current task.

They read the env's hidden task (its reference solution), so they prove that every task
can be solved and that the checkers accept a right answer; tests and ``bench/`` drive
envs with them. A policy maps the conversation so far to the next message::

    env = gymnasium.make("rollgym/Shell-v0", sandbox_pool=pool)
    obs, _ = env.reset(options={"task_id": "make-dir"})
    policy = solver(env)
    obs, reward, terminated, truncated, info = env.step(policy(list(obs)))
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium

from rollgym.envs.guess_demos import GuessPolicy
from rollgym.envs.guess_number import GuessNumberEnv
from rollgym.envs.guess_tool import GuessToolEnv, guess_call
from rollgym.envs.messages import Message
from rollgym.envs.python_tests import PythonTestsEnv
from rollgym.envs.shell import ShellEnv
from rollgym.envs.tool_use import ToolAnswerEnv

Policy = Callable[[Sequence[Message]], str]


def fenced(language: str, code: str) -> str:
    return f"```{language}\n{code}\n```"


def tool_call(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def solver(env: gymnasium.Env[Any, Any]) -> Policy:
    """The reference solver of the task ``env`` was last reset to."""
    base = env.unwrapped
    if isinstance(base, GuessNumberEnv):
        return GuessPolicy(base.low, base.high)
    if isinstance(base, GuessToolEnv):
        oracle = GuessPolicy(base.low, base.high)  # it reads the one number of each call
        return lambda history: guess_call(int(oracle(history)))
    if isinstance(base, PythonTestsEnv):
        solution = fenced("python", base.task.solution)
        return lambda history: solution
    if isinstance(base, ShellEnv):
        commands = fenced("bash", base.task.solution)
        return lambda history: commands
    if isinstance(base, ToolAnswerEnv):
        return _tool_solver(base)
    raise TypeError(f"no scripted solver for {type(base).__name__}")


def _tool_solver(env: ToolAnswerEnv) -> Policy:
    assert env.task is not None, "reset the env first"
    calls = [tool_call(c.name, c.arguments) for c in env.task.solution]

    def policy(history: Sequence[Message]) -> str:
        turn = sum(m["role"] == "assistant" for m in history)
        if turn < len(calls):
            return calls[turn]
        return f"<answer>{history[-1]['content'].strip()}</answer>"

    return policy
