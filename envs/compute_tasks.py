"""The tasks of ``rollgym/Compute-v0``, made from a seed: questions only a computation answers.

Each kind pairs a question with the program that answers it and the answer itself, all
computed here on the host from the seed (the box only ever runs the agent's code)::

    >>> import random
    >>> solved = make_task(random.Random(0), kinds=("mul",), digits=4)
    >>> solved.task.question, solved.codes, solved.outputs
    ('What is 7890 * 1663?', ('print(7890 * 1663)',), ('13121070\\n',))
    >>> solved.task.answer
    '13121070'

Kinds (``KINDS``):

* ``add``, ``mul``: two numbers of ``digits`` digits, added or multiplied;
* ``sum``: the sum of ``numbers`` numbers of ``digits - 1`` digits, one per line of
  ``numbers.txt`` (the file is put in the box; the question does not show it);
* ``scale`` (two steps): ``n.txt`` holds a number of ``digits`` digits; the question asks
  for it times a number of ``digits - 1`` digits. The demonstrations read the file in one
  call and multiply in a second, copying the first call's output into it.

A task's ``solution`` lists the calls of a correct play (``codes``, one ``python`` call
each) and ``outputs`` what each prints, exactly (the answer is the last one, trimmed). The task space is
large (``mul`` at 4 digits alone: 81 million questions), so held-out seeds almost never
meet a training or demonstration task, and none can be answered by heart.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from rollgym.envs.tasksets import ToolCallSpec, ToolTask

Kind = Literal["add", "mul", "sum", "scale"]
KINDS: tuple[Kind, ...] = ("add", "mul", "sum", "scale")
SINGLE_STEP: tuple[Kind, ...] = ("add", "mul", "sum")
NUMBERS_FILE, NUMBER_FILE = "numbers.txt", "n.txt"


@dataclasses.dataclass(frozen=True)
class SolvedTask:
    """A task, the code of each call that solves it, and what each call prints."""

    task: ToolTask
    codes: tuple[str, ...]
    outputs: tuple[str, ...]


def make_task(
    rng: random.Random, *, kinds: Sequence[Kind] = SINGLE_STEP, digits: int = 4, numbers: int = 6
) -> SolvedTask:
    """One task of a kind drawn from ``kinds``, its numbers drawn with ``rng``."""
    kind = kinds[rng.randrange(len(kinds))]
    if kind in ("add", "mul"):
        a, b = _number(rng, digits), _number(rng, digits)
        sign, value = ("+", a + b) if kind == "add" else ("*", a * b)
        expression = f"{a} {sign} {b}"
        return _solved(kind, f"What is {expression}?", {}, [f"print({expression})"], [value])
    if kind == "sum":
        values = [_number(rng, max(digits - 1, 1)) for _ in range(numbers)]
        files = {NUMBERS_FILE: "".join(f"{v}\n" for v in values)}
        question = f"What is the sum of the numbers in {NUMBERS_FILE}?"
        code = f"print(sum(int(x) for x in open('{NUMBERS_FILE}')))"
        return _solved(kind, question, files, [code], [sum(values)])
    n, k = _number(rng, digits), _number(rng, max(digits - 1, 1))
    question = f"{NUMBER_FILE} holds a number. What is that number times {k}?"
    codes = [f"print(open('{NUMBER_FILE}').read())", f"print({n} * {k})"]
    return _solved(kind, question, {NUMBER_FILE: str(n)}, codes, [n, n * k])


def episode_task(np_random: np.random.Generator, **knobs: Any) -> SolvedTask:
    """The task of an episode whose env ``reset`` seeded ``np_random`` (``make_task``'s
    ``knobs``): one draw from it seeds the task's own ``random.Random``."""
    return make_task(random.Random(int(np_random.integers(2**63))), **knobs)


def _number(rng: random.Random, digits: int) -> int:
    return rng.randint(10 ** (digits - 1), 10**digits - 1)


def _solved(
    kind: str, question: str, files: dict[str, str], codes: list[str], values: list[int]
) -> SolvedTask:
    outputs = [f"{value}\n" for value in values]  # as ``print`` writes them
    digest = hashlib.sha256((question + repr(sorted(files.items()))).encode()).hexdigest()
    task = ToolTask(
        id=f"{kind}-{digest[:12]}",
        question=question,
        files=files,
        answer=str(values[-1]),
        solution=tuple(ToolCallSpec(name="python", arguments={"code": c}) for c in codes),
    )
    return SolvedTask(task, tuple(codes), tuple(outputs))
