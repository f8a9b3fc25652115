"""ToolUse: answer a question with tools that run in the sandbox.

Tools (OpenAI function format, in ``env.tools``): ``python`` (run code in a Python
session that lasts the episode), ``read_file``, ``write_file`` and ``list_files`` (paths
relative to the working directory, where the task's files are put at reset). The agent
calls tools with ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (several per
message are allowed); each call gets one ``tool`` message back, in order. It ends the
episode with ``<answer>...</answer>``. ``tools=`` offers a subset, declared your own way: a
list of OpenAI function dicts, each naming one of the tools above (which runs it), shown to
the agent as given, e.g. the schema another framework derives from a Python function::

    gymnasium.make("rollgym/ToolUse-v0", tools=[{"type": "function", "function": {
        "name": "python", "description": "Run Python code.",
        "parameters": {"type": "object", "properties": {"code": {"type": "string"}},
                       "required": ["code"]}}}])

Reward: ``AnswerReward`` pays 1.0 for a correct final answer (case and surrounding space
ignored; numbers compared as numbers), 0.0 otherwise; ``ToolStepReward`` charges
``invalid_penalty`` for a rejected message and ``tool_error_penalty`` for a call that
failed.

Task set: ``envs/tasks/tool_use.jsonl`` (21 tasks), or ``tasks=``/``task_file=``.
"""

from __future__ import annotations

import abc
import dataclasses
import re
import shlex
from collections.abc import Callable, Sequence
from typing import Any

import jsonschema
from typing_extensions import Unpack

from rollgym.envs.core import Opening, Turn
from rollgym.envs.errors import ActionError, EnvLoadError
from rollgym.envs.messages import Message, clean_text, clip_text, system, tool, user
from rollgym.envs.parsing import has_tool_call, parse_tool_calls
from rollgym.envs.programs import Program, RunPython, RunShell, read_file, write_file
from rollgym.envs.sandboxed import SandboxEnv, SandboxOptions
from rollgym.envs.tasksets import ToolTask, choose, task_set
from rollgym.envs.tools import Tool, ToolCall
from rollgym.sandboxes.base import SandboxFileError, SandboxPool

SYSTEM_PROMPT = (
    "Answer the user's question. You may call the tools; they run in a sandbox where the "
    "task's files are in your working directory. Give your final answer as "
    "<answer>...</answer>."
)
_PATH = {"type": "string", "minLength": 1, "description": "relative to the working directory"}
TOOLS: tuple[Tool, ...] = (
    Tool(
        "python",
        "Run Python code in a session that keeps its variables; returns what it prints.",
        {"type": "object", "properties": {"code": {"type": "string", "minLength": 1}},
         "required": ["code"], "additionalProperties": False},
    ),
    Tool(
        "read_file",
        "Read a text file.",
        {"type": "object", "properties": {"path": _PATH}, "required": ["path"],
         "additionalProperties": False},
    ),
    Tool(
        "write_file",
        "Write a text file (replacing it), creating folders as needed.",
        {"type": "object", "properties": {"path": _PATH, "content": {"type": "string"}},
         "required": ["path", "content"], "additionalProperties": False},
    ),
    Tool(
        "list_files",
        "List the files in a folder.",
        {"type": "object", "properties": {"path": _PATH}, "additionalProperties": False},
    ),
)  # fmt: skip
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


@dataclasses.dataclass(frozen=True)
class ToolStep:
    """One message: how many tool calls it made, how many failed, whether it was valid."""

    calls: int = 0
    failed_calls: int = 0
    valid: bool = True


@dataclasses.dataclass(frozen=True)
class AnswerEpisode:
    answer: str
    expected: str


@dataclasses.dataclass(frozen=True)
class ToolStepReward:
    invalid_penalty: float = 0.05
    tool_error_penalty: float = 0.0

    def __call__(self, step: ToolStep) -> float:
        if not step.valid:
            return -self.invalid_penalty
        return -self.tool_error_penalty * step.failed_calls


def same_answer(given: str, expected: str) -> bool:
    """Equal after trimming and case-folding, or equal as numbers."""
    a, b = " ".join(given.split()).casefold(), " ".join(expected.split()).casefold()
    if a == b:
        return True
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    return abs(x - y) <= 1e-9 * max(1.0, abs(y))


@dataclasses.dataclass(frozen=True)
class AnswerReward:
    """1.0 for a correct final answer, else 0.0."""

    def __call__(self, episode: AnswerEpisode) -> float:
        return 1.0 if same_answer(episode.answer, episode.expected) else 0.0


class ToolAnswerEnv(SandboxEnv[ToolStep, AnswerEpisode]):
    """Tools that run in the box, then one final answer judged on the host.

    The base of ``ToolUseEnv`` (tasks from a set) and ``ComputeEnv`` (tasks made from the
    seed): a subclass says which task an episode plays (``_next_task``) and may change the
    ``system_prompt``; the tools, the turns and the rewards are the same.
    """

    system_prompt = SYSTEM_PROMPT

    def __init__(
        self,
        *,
        sandbox_pool: SandboxPool | None = None,
        step_reward: Callable[[ToolStep], float] | None = None,
        terminal_reward: Callable[[AnswerEpisode], float] | None = None,
        tools: Sequence[dict[str, Any]] | None = None,
        **options: Unpack[SandboxOptions],
    ):
        super().__init__(
            step_reward=step_reward or ToolStepReward(),
            terminal_reward=terminal_reward or AnswerReward(),
            sandbox_pool=sandbox_pool,
            **options,
        )
        declared = [t.to_openai() for t in TOOLS] if tools is None else tools
        self.tools = [dict(t) for t in declared]
        self._offered = tuple(offered_tool(tool) for tool in self.tools)
        self._task: ToolTask | None = None
        self._answer = ""

    @abc.abstractmethod
    def _next_task(self, options: dict[str, Any]) -> ToolTask:
        """The task of the episode ``reset`` starts (drawn with ``self.np_random``)."""

    @property
    def task(self) -> ToolTask | None:
        """The task of the current (or last) episode; None before the first ``reset``."""
        return self._task

    def _open_program(self, options: dict[str, Any]) -> Program[Opening]:
        self._task = self._next_task(options)
        self._answer = ""
        for path, content in self._task.files.items():
            yield from write_file(path, content)
        return Opening(self._task.id, (system(self.system_prompt), user_question(self._task)))

    def _turn_program(self, action: str) -> Program[Turn[ToolStep]]:
        answers = _ANSWER.findall(action)
        if has_tool_call(action) and answers:
            raise ActionError("Either call tools or give your <answer>, not both in one message.")
        if answers:
            return self._answered(answers)
        calls = parse_tool_calls(action, self._offered)
        if not calls:
            raise ActionError(
                'Call a tool with <tool_call>{"name": ..., "arguments": {...}}</tool_call> '
                "or give your final answer as <answer>...</answer>."
            )
        messages: list[Message] = []
        failed = 0
        for call in calls:
            text, ok = yield from self._call_tool(call)
            messages.append(tool(clip_text(clean_text(text), self.max_feedback_chars)))
            failed += not ok
        error = f"{failed} of {len(calls)} tool calls failed" if failed else None
        return Turn(
            tuple(messages),
            ToolStep(len(calls), failed),
            failure="task" if failed else None,
            error=error,
        )

    def _answered(self, answers: list[str]) -> Turn[ToolStep]:
        if len(answers) > 1:
            raise ActionError("Give exactly one <answer>...</answer>.")
        self._answer = answers[0].strip()
        right = same_answer(self._answer, self._current().answer)
        feedback = "Correct." if right else "Wrong answer."
        return Turn(
            (user(feedback),),
            ToolStep(),
            terminated=True,
            failure=None if right else "task",
            error=None if right else "wrong answer",
        )

    def _call_tool(self, call: ToolCall) -> Program[tuple[str, bool]]:
        """The tool's output for the agent, and whether the call worked."""
        args = call.arguments
        if call.name == "python":
            run = yield from self.agent_command(RunPython(args["code"], self.command_timeout_s))
            if run.result is None:
                return run.problem or "error: no result", False
            output = (run.result.stdout + run.result.stderr) or "(no output)"
            if run.result.truncated:
                output += "\n(output was cut at the sandbox's limit)"
            return output, run.result.ok
        if call.name == "list_files":
            path = args.get("path", ".")
            run = yield from self.agent_command(RunShell(f"ls -1A -- {shlex.quote(path)}", 5.0))
            if run.result is None or not run.result.ok:
                return f"error: cannot list {path}", False
            return run.result.stdout or "(empty folder)", True
        try:
            if call.name == "read_file":
                data = yield from read_file(args["path"])
                return data.decode("utf-8", errors="replace"), True
            yield from write_file(args["path"], args["content"])
            return f"wrote {len(args['content'])} characters to {args['path']}", True
        except SandboxFileError as exc:
            reason = str(exc).rsplit(": ", 1)[-1]
            return f"error: {call.name} {args['path']}: {reason}", False

    def _rejected(self, error: str) -> ToolStep:
        return ToolStep(valid=False)

    def _episode(self) -> AnswerEpisode:
        return AnswerEpisode(self._answer, self._current().answer)

    def _current(self) -> ToolTask:
        assert self._task is not None, "ChatEnv only steps a running episode"
        return self._task


class ToolUseEnv(ToolAnswerEnv):
    """Answer questions with sandboxed tools, tasks from a set; see the module docstring."""

    def __init__(
        self,
        *,
        sandbox_pool: SandboxPool | None = None,
        tasks: Sequence[ToolTask] | None = None,
        task_file: str | None = None,
        step_reward: Callable[[ToolStep], float] | None = None,
        terminal_reward: Callable[[AnswerEpisode], float] | None = None,
        tools: Sequence[dict[str, Any]] | None = None,
        **options: Unpack[SandboxOptions],
    ):
        super().__init__(
            sandbox_pool=sandbox_pool,
            step_reward=step_reward,
            terminal_reward=terminal_reward,
            tools=tools or None,
            **options,
        )
        self.tasks = task_set(ToolTask, tasks, task_file, "tool_use")

    def _next_task(self, options: dict[str, Any]) -> ToolTask:
        return choose(self.tasks, options, self.np_random)


def offered_tool(declared: dict[str, Any]) -> Tool:
    """The ``Tool`` an OpenAI function dict declares: one of ``TOOLS``, the same arguments."""
    function = declared.get("function")
    if declared.get("type") != "function" or not isinstance(function, dict):
        raise EnvLoadError(f'a tool is {{"type": "function", "function": {{...}}}}, not {declared}')
    name = function.get("name")
    builtin = next((t for t in TOOLS if t.name == name), None)
    if builtin is None:
        raise EnvLoadError(f"tool {name!r} is not one of {[t.name for t in TOOLS]}")
    parameters = function.get("parameters")
    arguments = parameters.get("properties", {}) if isinstance(parameters, dict) else {}
    if not isinstance(parameters, dict) or set(arguments) != set(builtin.parameters["properties"]):
        raise EnvLoadError(
            f"tool {name!r} takes the arguments {sorted(builtin.parameters['properties'])}; "
            f"its declaration has {sorted(arguments)}"
        )
    try:
        return Tool(builtin.name, str(function.get("description", "")), parameters)
    except jsonschema.SchemaError as exc:
        raise EnvLoadError(f"tool {name!r}: not a JSON Schema ({exc.message})") from exc


def user_question(task: ToolTask) -> Message:
    files = sorted(task.files)
    listed = f"\nFiles: {', '.join(files)}" if files else ""
    return user(task.question + listed)
