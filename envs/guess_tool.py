"""GuessTool: GuessNumber played through a sandboxed tool, ``guess(number)``.

The game of ``envs.guess_number`` with range feedback, but each guess is a tool call and its verdict comes from a program run
in the box (``envs.guess_verdict``, one ``python3`` process per guess), the way an agent's
tools run in a sandbox::

    system     Guess my number from 1 to 8. Call the guess tool with one number.
               (+ the tool, listed by the chat template)
    user       Guess a number from 1 to 8.
    assistant  <tool_call>{"name": "guess", "arguments": {"number": 4}}</tool_call>
    tool       Higher. From 5 to 8.
    assistant  <tool_call>{"name": "guess", "arguments": {"number": 6}}</tool_call>
    tool       Correct!

A message must hold exactly one call of ``guess`` with a number in the range; anything
else is rejected with feedback and costs ``invalid_penalty`` (``GuessStepReward``). The host
passes the target to the program and keeps the truth: it judges each guess itself, ends the
episode when the number is found and pays ``1 - turn_cost * (turns - 1)``
(``GuessTerminalReward``), as GuessNumber does. A verdict the program got wrong, or could
not give, is an infrastructure failure.

``GUESS_TOOL`` is the tool as transformers' ``get_json_schema`` derives it from a documented
``def guess(self, number: int) -> str`` (TRL's environments declare their tools that way),
so an agent sees the same prompt here as through TRL's ``environment_factory``.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

from typing_extensions import Unpack

from rollgym.envs import guess_verdict
from rollgym.envs.core import Opening, Turn
from rollgym.envs.errors import ActionError, InfraError
from rollgym.envs.guess_number import (
    FEEDBACK,
    GuessEpisode,
    GuessStep,
    GuessStepReward,
    GuessTerminalReward,
    judge,
    pick_target,
    task_ids,
)
from rollgym.envs.messages import Message, system, tool, user
from rollgym.envs.parsing import parse_tool_calls
from rollgym.envs.programs import Program, RunShell
from rollgym.envs.sandboxed import SandboxEnv, SandboxOptions
from rollgym.envs.tools import Tool
from rollgym.sandboxes.base import AgentFault, SandboxPool

GUESS_TOOL = Tool(
    "guess",
    "Guess the hidden number.",
    {
        "type": "object",
        "properties": {"number": {"type": "integer", "description": "Your guess."}},
        "required": ["number"],
    },
)
VERDICT_PROGRAM = ("python3", "-I", "-S", "-c", Path(guess_verdict.__file__).read_text("utf-8"))
CALL_FORMAT = '<tool_call>{"name": "guess", "arguments": {"number": ...}}</tool_call>'


def opening(low: int, high: int) -> tuple[Message, Message]:
    """The system prompt and the first question (the same in every episode)."""
    span = f"from {low} to {high}"
    return (
        system(f"Guess my number {span}. Call the guess tool with one number."),
        user(f"Guess a number {span}."),
    )


def guess_call(number: int) -> str:
    """The message that calls ``guess(number)``."""
    body = {"name": GUESS_TOOL.name, "arguments": {"number": number}}
    return f"<tool_call>{json.dumps(body)}</tool_call>"


@dataclasses.dataclass(frozen=True)
class Reply:
    """What the program answered: the agent's feedback and the range left open."""

    text: str
    low: int
    high: int


def verdict_argv(open_range: tuple[int, int], target: int, guess: int) -> list[str]:
    """The command that asks the box for ``guess``'s verdict (``open_range`` before it)."""
    return [*VERDICT_PROGRAM, *(str(n) for n in (*open_range, target, guess))]


def read_reply(stdout: str, guess: int, target: int) -> Reply:
    """The program's answer, checked against the host's truth; ``InfraError`` if it is wrong."""
    try:
        data = json.loads(stdout)
        reply = Reply(str(data["reply"]), int(data["low"]), int(data["high"]))
    except (ValueError, TypeError, KeyError) as exc:
        raise InfraError(f"the guess tool answered {stdout[:200]!r}: {exc!r}") from exc
    if (reply.text == FEEDBACK["correct"]) != (guess == target):
        raise InfraError(f"the guess tool said {reply.text!r} to {guess}; the target is {target}")
    return reply


def check_guess(number: int, low: int, high: int) -> int:
    """``number`` if it lies in ``[low, high]``, else ``ActionError`` (GuessNumber's words)."""
    if not low <= number <= high:
        raise ActionError(f"Out of range: pick a number from {low} to {high}.")
    return int(number)


class GuessToolEnv(SandboxEnv[GuessStep, GuessEpisode]):
    """Find a hidden number in ``[low, high]`` with a sandboxed tool; see the module docstring."""

    def __init__(
        self,
        *,
        low: int = 1,
        high: int = 8,
        sandbox_pool: SandboxPool | None = None,
        step_reward: Callable[[GuessStep], float] | None = None,
        terminal_reward: Callable[[GuessEpisode], float] | None = None,
        **options: Unpack[SandboxOptions],
    ):
        if low > high:
            raise ValueError(f"low ({low}) must be <= high ({high})")
        options.setdefault("max_action_chars", 4_000)
        super().__init__(
            step_reward=step_reward or GuessStepReward(),
            terminal_reward=terminal_reward or GuessTerminalReward(),
            sandbox_pool=sandbox_pool,
            **options,
        )
        self.low, self.high = low, high
        self.tools = [GUESS_TOOL.to_openai()]
        self._target = low
        self._open_range = (low, high)
        self._found = False

    def task_ids(self) -> list[str]:
        return task_ids(self.low, self.high)

    def _open_program(self, options: dict[str, Any]) -> Program[Opening]:
        self._target = pick_target(options, self.np_random, self.low, self.high)
        self._open_range, self._found = (self.low, self.high), False
        yield from ()  # nothing to set up in the box: each guess brings its numbers
        return Opening(f"guess-{self._target}", opening(self.low, self.high))

    def _turn_program(self, action: str) -> Program[Turn[GuessStep]]:
        calls = parse_tool_calls(action, (GUESS_TOOL,))
        if len(calls) != 1:
            raise ActionError(f"Call the guess tool once per message: {CALL_FORMAT}")
        guess = check_guess(calls[0].arguments["number"], self.low, self.high)
        command = shlex.join(verdict_argv(self._open_range, self._target, guess))
        try:
            result = yield RunShell(command, self.command_timeout_s)
        except AgentFault as exc:  # the program is ours, not the agent's: not a task failure
            raise InfraError(f"the guess tool did not finish: {exc!r}") from exc
        if not result.ok:
            raise InfraError(f"the guess tool failed: {result}")
        reply = read_reply(result.stdout, guess, self._target)
        self._open_range, self._found = (reply.low, reply.high), guess == self._target
        verdict = judge(guess, self._target)
        return Turn((tool(reply.text),), GuessStep(guess, verdict), terminated=self._found)

    def _rejected(self, error: str) -> GuessStep:
        return GuessStep(None, "invalid")

    def _episode(self) -> GuessEpisode:
        return GuessEpisode(found=self._found, turns=self.turns)
