"""Task sets of the reference environments: typed, validated once, shipped as JSON lines.

Each env takes ``tasks=`` (a sequence of its task model) or ``task_file=`` (a JSONL file,
one task per line); without either it uses the file shipped in ``envs/tasks/``. Every task
carries a reference solution, so tests can prove that each task is solvable and that its
checker tells right from wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from rollgym.envs.errors import EnvLoadError, TaskNotFound

_ID = r"^[a-z0-9][a-z0-9_-]*$"


class Task(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=_ID)


class PythonTask(Task):
    """Write ``signature``'s function, judged by ``(call, expected literal)`` pairs.

    ``examples`` are public, as in a benchmark's prompt: shown with their values, run on
    every submission, their failures described; they earn nothing. ``tests`` are hidden:
    they alone decide the reward, and the agent only learns how many passed, never a call's
    expected value (feedback that printed them paid a lookup table: a second submission
    that maps each call to its printed value). A task file written before ``examples``
    existed still loads: its tests are all hidden, and the agent sees only its prompt.
    """

    prompt: str
    signature: str = Field(pattern=r"^def \w+\(.*\).*:$")
    examples: tuple[tuple[str, str], ...] = ()
    tests: tuple[tuple[str, str], ...] = Field(min_length=1)
    solution: str

    @model_validator(mode="after")
    def _examples_are_not_tests(self) -> PythonTask:
        shown = {call for call, _ in self.examples} & {call for call, _ in self.tests}
        if shown:
            raise ValueError(f"a hidden test cannot also be a public example: {sorted(shown)}")
        return self


class Check(BaseModel):
    """One condition on the box's state: a shell test that exits 0 when it holds.

    ``command`` runs as the box's verifier, never as the agent: it reads the agent's files
    as data and must not run the agent's programs. When a check needs what a program of
    the agent's prints, ``probe`` runs that program first, as the agent, and its stdout
    is the check's stdin (``probe: "./run.sh"``, ``command: 'test "$(cat)" = ok'``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    describe: str
    command: str
    probe: str | None = None


class ShellTask(Task):
    """Reach a state of the work dir; ``setup`` builds the start, ``checks`` verify the goal."""

    prompt: str
    setup: str = ""
    checks: tuple[Check, ...] = Field(min_length=1)
    solution: str


class ToolCallSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    arguments: dict[str, object]


class ToolTask(Task):
    """Answer ``question`` using the tools; ``files`` are put in the work dir first.

    ``solution`` is a list of tool calls whose last result is the answer.
    """

    question: str
    files: dict[str, str] = Field(default_factory=dict)
    answer: str
    solution: tuple[ToolCallSpec, ...] = Field(min_length=1)

    @field_validator("files")
    @classmethod
    def _relative_paths(cls, files: dict[str, str]) -> dict[str, str]:
        bad = [p for p in files if p.startswith("/") or ".." in p.split("/")]
        if bad:
            raise ValueError(f"task files must be relative paths inside the work dir: {bad}")
        return files


TaskT = TypeVar("TaskT", bound=Task)


def load_tasks(model: type[TaskT], path: str | Path) -> tuple[TaskT, ...]:
    """Read and validate a JSONL task file; ``EnvLoadError`` says which line is wrong."""
    tasks = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                tasks.append(model.model_validate_json(line))
            except ValidationError as exc:
                raise EnvLoadError(f"{path}:{number}: not a valid {model.__name__}: {exc}") from exc
    return checked(tasks)


def shipped_tasks(model: type[TaskT], name: str) -> tuple[TaskT, ...]:
    """The task set shipped as ``envs/tasks/<name>.jsonl``."""
    with resources.as_file(resources.files("rollgym.envs") / "tasks" / f"{name}.jsonl") as path:
        return load_tasks(model, path)


def checked(tasks: Sequence[TaskT]) -> tuple[TaskT, ...]:
    """``tasks`` as a tuple, refusing an empty set and duplicate ids."""
    if not tasks:
        raise EnvLoadError("a task set needs at least one task")
    ids = [task.id for task in tasks]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise EnvLoadError(f"duplicate task ids: {duplicates}")
    return tuple(tasks)


def pick(tasks: Sequence[TaskT], task_id: object) -> TaskT:
    """The task with ``task_id``, or ``TaskNotFound``."""
    for task in tasks:
        if task.id == task_id:
            return task
    raise TaskNotFound(f"no task {task_id!r}; known: {', '.join(t.id for t in tasks)}")


def task_set(
    model: type[TaskT], tasks: Sequence[TaskT] | None, task_file: str | None, shipped: str
) -> tuple[TaskT, ...]:
    """An env's tasks: ``tasks`` if given, else ``task_file``, else the shipped set."""
    if tasks is not None:
        return checked(tasks)
    if task_file is not None:
        return load_tasks(model, task_file)
    return shipped_tasks(model, shipped)


def choose(tasks: Sequence[TaskT], options: dict[str, Any], rng: np.random.Generator) -> TaskT:
    """``options["task_id"]``'s task, or one drawn with the env's seeded ``rng``."""
    if "task_id" in options:
        return pick(tasks, options["task_id"])
    return tasks[int(rng.integers(len(tasks)))]
