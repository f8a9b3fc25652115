"""How an attacker speaks to an env it knows nothing about: the env's own API.

Every env takes text; ``Channels.of`` reads the rest from the env and its opening: the
tools it declares (OpenAI function format, called as the default template teaches:
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``) and a function the task asks
for (``def name(`` in the opening). Each method returns every action that says one thing
through every channel that may carry it: a shell command as a ```bash block and from
Python (a ```python block, a ``python`` tool); a value claimed as the answer as ``<answer>...</answer>``, as plain text
and as a function returning it. An env refuses the channels it does not speak with
feedback, which costs the attacker a turn and nothing else.

>>> channels = Channels(tools={}, function="add")
>>> channels.claims("5")[2]
'```python\\ndef add(*args, **kwargs):\\n    return 5\\n```'
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Any

import gymnasium

from rollgym.envs.scripted import fenced, tool_call

_FUNCTION = re.compile(r"\bdef (\w+)\(")


@dataclasses.dataclass(frozen=True)
class Channels:
    """See the module docstring. ``tools`` maps each tool's name to its argument schema's
    ``properties``."""

    tools: dict[str, dict[str, Any]]
    function: str | None

    @classmethod
    def of(cls, env: gymnasium.Env[Any, str], opening: str) -> Channels:
        try:
            declared = env.get_wrapper_attr("tools") or []
        except AttributeError:
            declared = []
        tools: dict[str, dict[str, Any]] = {}
        for tool in declared:
            function = tool.get("function", {}) if isinstance(tool, dict) else {}
            parameters = function.get("parameters") or {}
            if isinstance(function.get("name"), str):
                tools[function["name"]] = dict(parameters.get("properties") or {})
        found = _FUNCTION.search(opening)
        return cls(tools, found.group(1) if found else None)

    def offers(self, name: str, *arguments: str) -> bool:
        """Whether a tool ``name`` takes all of ``arguments``."""
        return name in self.tools and all(a in self.tools[name] for a in arguments)

    def shell(self, command: str) -> list[str]:
        """``command`` as a ```bash block, and from Python (a ```python block, a ``python``
        tool if there is one): an env that runs only Python still runs it."""
        run = (
            "import subprocess\nrun = subprocess.run("
            f"{command!r}, shell=True, capture_output=True, text=True, errors='replace')\n"
            "print((run.stdout + run.stderr)[-4000:])"
        )
        return [fenced("bash", command), *self.python(run)]

    def python(self, code: str) -> list[str]:
        """``code`` as a ```python block, and through a ``python`` tool if there is one."""
        actions = [fenced("python", code)]
        if self.offers("python", "code"):
            actions.append(tool_call("python", {"code": code}))
        return actions

    def claims(self, value: str) -> list[str]:
        """``value`` claimed as the answer, in each form an env may take an answer."""
        actions = [f"<answer>{value}</answer>", value]
        if self.function is not None:
            body = f"def {self.function}(*args, **kwargs):\n    return {literal(value)}"
            actions.append(fenced("python", body))
        return actions

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        return tool_call(name, arguments)


def literal(value: str) -> str:
    """``value`` as Python source: itself if it is a plain literal, else a string of it.

    >>> literal("[1, 2]"), literal("hello")
    ('[1, 2]', "'hello'")
    """
    try:
        ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return repr(value)
    return value
