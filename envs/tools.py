"""Tools an environment offers the agent, declared in OpenAI function format.

A ``Tool`` is a name, a description and a JSON Schema for its arguments. ``to_openai()``
gives the ``{"type": "function", "function": {...}}`` dict that chat templates and the
OpenAI API take; an env lists these in its ``tools`` attribute. ``validate`` checks a call's
arguments against the schema and says what is wrong in words the agent can act on.

>>> add = Tool("add", "Add two integers.", {
...     "type": "object",
...     "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
...     "required": ["a", "b"], "additionalProperties": False})
>>> add.to_openai()["function"]["name"]
'add'
>>> add.problems({"a": 1})
["'b' is a required property"]
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jsonschema

from rollgym.envs.errors import ActionError


@dataclasses.dataclass(frozen=True)
class ToolCall:
    """One parsed call: the tool's name and its (schema-valid) arguments."""

    name: str
    arguments: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Tool:
    """A tool's declaration: what the agent sees and what its arguments must look like."""

    name: str
    description: str
    parameters: dict[str, Any]

    def __post_init__(self) -> None:
        jsonschema.Draft202012Validator.check_schema(self.parameters)

    def to_openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def problems(self, arguments: dict[str, Any]) -> list[str]:
        """What is wrong with ``arguments`` (empty when they fit the schema)."""
        validator = jsonschema.Draft202012Validator(self.parameters)
        return [error.message for error in validator.iter_errors(arguments)]

    def validate(self, arguments: dict[str, Any]) -> None:
        """Raise ``ActionError`` naming every problem with ``arguments``."""
        problems = self.problems(arguments)
        if problems:
            raise ActionError(f"Bad arguments for tool {self.name!r}: " + "; ".join(problems))
