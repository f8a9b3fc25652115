"""Compute: questions only a computation answers, with a ``python`` tool in the sandbox.

The built-in run's task (``rollgym run``, ``make run``). Each episode's question is
made from its seed (``envs.compute_tasks``): arithmetic on numbers too long to do by heart, a sum over a file
that only the box holds, or (two steps) a number read from a file and then multiplied.
The agent runs code with the ``python`` tool in a box from the warm pool, reads what it
printed, and answers; the host computed the answer from the seed and judges it::

    system     Use the python tool, then answer with <answer>...</answer>.
               (+ the python tool, listed by the chat template)
    user       What is 7890 * 1663?
    assistant  <tool_call>{"name": "python", "arguments": {"code": "print(7890 * 1663)"}}</tool_call>
    tool       13121070
    assistant  <answer>13121070</answer>

Rewards and turns are ``ToolUse``'s (``AnswerReward``: 1.0 for the right answer, else
0.0; ``ToolStepReward``: -0.05 for a message that is neither a valid call nor one answer).
Everything the agent's text can cause is a task failure: malformed calls, code that
raises, loops (killed at ``command_timeout_s``), huge output (cut), memory hogs (killed).

Knobs: ``kinds`` (``add``, ``mul``, ``sum``; ``scale`` takes two calls), ``digits`` (the
operands' size), ``numbers`` (the file's length). ``tool=False`` offers no tool and says
so: the no-tool baseline, what the model answers from its weights alone.

    env = gymnasium.make("rollgym/Compute-v0", kinds=["mul", "sum"], digits=5)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from typing_extensions import Unpack

from rollgym.envs.compute_tasks import KINDS, SINGLE_STEP, Kind, SolvedTask, episode_task
from rollgym.envs.errors import EnvLoadError
from rollgym.envs.sandboxed import SandboxOptions
from rollgym.envs.tasksets import ToolTask
from rollgym.envs.tool_use import AnswerEpisode, ToolAnswerEnv, ToolStep
from rollgym.envs.tools import Tool
from rollgym.sandboxes.base import SandboxPool

# The python tool, declared as briefly as it can be: the whole declaration is in every
# prompt (about 65 tokens of the default model's, against 100 for ToolUse's wording).
PYTHON_TOOL = Tool(
    "python",
    "Run Python code; returns what it prints.",
    {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
)
WITH_TOOL = "Use the python tool, then answer with <answer>...</answer>."
WITHOUT_TOOL = "Answer with <answer>...</answer>."


class ComputeEnv(ToolAnswerEnv):
    """Tasks made from the seed, a python tool to solve them; see the module docstring."""

    def __init__(
        self,
        *,
        sandbox_pool: SandboxPool | None = None,
        kinds: Sequence[Kind] = SINGLE_STEP,
        digits: int = 4,
        numbers: int = 6,
        tool: bool = True,
        step_reward: Callable[[ToolStep], float] | None = None,
        terminal_reward: Callable[[AnswerEpisode], float] | None = None,
        **options: Unpack[SandboxOptions],
    ):
        unknown = sorted(set(kinds) - set(KINDS))
        if not kinds or unknown:
            raise EnvLoadError(f"kinds must be some of {list(KINDS)}, not {list(kinds)}")
        if not 2 <= digits <= 12 or not 1 <= numbers <= 50:
            raise EnvLoadError(f"digits must be 2-12 and numbers 1-50, not {digits}, {numbers}")
        super().__init__(
            sandbox_pool=sandbox_pool,
            step_reward=step_reward,
            terminal_reward=terminal_reward,
            tools=[PYTHON_TOOL.to_openai()] if tool else [],
            **options,
        )
        self.kinds, self.digits, self.numbers = tuple(kinds), digits, numbers
        self.system_prompt = WITH_TOOL if tool else WITHOUT_TOOL
        self.solved: SolvedTask | None = None  # the episode's task with its solution's outputs

    def _next_task(self, options: dict[str, Any]) -> ToolTask:
        knobs = {"kinds": self.kinds, "digits": self.digits, "numbers": self.numbers}
        self.solved = episode_task(self.np_random, **knobs)
        return self.solved.task
