"""Demonstrations of ``rollgym/Compute-v0`` for the SFT warm start, and copy drills.

``demonstrations`` writes whole conversations as the env plays them: the opening (system
prompt, question), then each call of the task's solution with what the box prints, then
the answer. A ``direct_share`` of them answer at once instead, without the tool: the question's first
number, which is never the answer. That is the warm start's flaw for RL to remove: a
policy that uses the tool about half the time, whose reward says the tool pays
(docs/training.md has the measurements behind the share).

``copies`` are generic copy sequences, not of the task: a user message of random
characters (digits mostly) followed by random filler, answered with the characters again.
A model from random weights has no way to copy from its context (an induction head); on
drills alone the default model found none in 800 steps of 32 (call 24 of 60 held-out
questions: only the copy-free ``sum`` calls; answers 0 of 60). After 600 steps of 64
copies (3.5 minutes here), 300 steps of drills taught it both copies: call 58 of 60,
answer 41 of 60 (greedy, held-out questions; docs/training.md).

``drills`` are short conversations with no system prompt and no tools: a question and
its call, or a call's output and the answer. Copying digits from one place of the context
to another is what the task needs and what a model trained from random weights lacks. On
these 60-110-token drills the default model learned both copies in one run of 600
optimizer steps (call 28/30, answer 25/30), and in none of eight others (other seeds and
rates, and TRL's trainer: docs/training.md); 190 steps of the task's 250-token
conversations taught it the format and no copying at all. A drill's call is context only
(weight 0) when the drill teaches the answer. The warm start trains the drills first, then
the conversations (``rollgym.run.warmstart``).

    >>> conversation = demonstrations(1, seed=0, direct_share=0.0, kinds=("mul",))[0]
    >>> [m["role"] for m in conversation]
    ['system', 'user', 'assistant', 'tool', 'assistant']
    >>> conversation[-1]["content"]
    '<answer>13121070</answer>'
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from typing import Any

from rollgym.envs.compute import WITH_TOOL
from rollgym.envs.compute_tasks import SINGLE_STEP, Kind, SolvedTask, make_task
from rollgym.envs.tool_use import user_question

Conversation = list[dict[str, Any]]


def python_call(code: str) -> str:
    """The message that calls the python tool with ``code``, in the model's call format."""
    return (
        "<tool_call>" + json.dumps({"name": "python", "arguments": {"code": code}}) + "</tool_call>"
    )


def answer(solved: SolvedTask) -> str:
    return f"<answer>{solved.task.answer}</answer>"


def demonstrations(
    n: int,
    *,
    seed: int,
    direct_share: float,
    kinds: Sequence[Kind] = SINGLE_STEP,
    digits: int = 4,
    numbers: int = 6,
) -> list[Conversation]:
    """``n`` conversations of the oracle's play on ``solved_tasks(n, seed=seed, ...)``,
    ``direct_share`` of them without the tool."""
    if not 0.0 <= direct_share <= 1.0:
        raise ValueError(f"direct_share must be in [0, 1], got {direct_share}")
    rng = random.Random(f"direct-{seed}")  # apart from the tasks' own draws
    out = []
    for solved in solved_tasks(n, seed=seed, kinds=kinds, digits=digits, numbers=numbers):
        opening: Conversation = [
            {"role": "system", "content": WITH_TOOL},
            dict(user_question(solved.task)),
        ]
        if rng.random() < direct_share:
            out.append([*opening, {"role": "assistant", "content": _guess(solved)}])
        else:
            out.append([*opening, *_play(solved), {"role": "assistant", "content": answer(solved)}])
    return out


def solved_tasks(
    n: int, *, seed: int, kinds: Sequence[Kind] = SINGLE_STEP, digits: int = 4, numbers: int = 6
) -> list[SolvedTask]:
    """The tasks ``demonstrations(n, seed=seed, ...)`` play, in order."""
    rng = random.Random(seed)
    return [make_task(rng, kinds=kinds, digits=digits, numbers=numbers) for _ in range(n)]


def drills(
    n: int,
    *,
    seed: int,
    kinds: Sequence[Kind] = SINGLE_STEP,
    digits: int = 4,
    numbers: int = 6,
) -> list[Conversation]:
    """``n`` short copy drills: half teach a question's call, half a call's answer."""
    rng = random.Random(seed)
    out = []
    for index in range(n):
        solved = make_task(rng, kinds=kinds, digits=digits, numbers=numbers)
        question = {"role": "user", "content": solved.task.question}
        play = _play(solved)
        if index % 2 == 0:
            out.append([question, play[0]])
        else:
            context = [{**m, "weight": 0} if m["role"] == "assistant" else m for m in play]
            out.append([question, *context, {"role": "assistant", "content": answer(solved)}])
    return out


DIGITS, MIXED = "0123456789", "0123456789abcdefghijklmnopqrstuvwxyz*+-()"
FILLER_ALPHABET = "abcdefghijklmnopqrstuvwxyz      .,"


def copies(n: int, *, seed: int) -> list[Conversation]:
    """``n`` copy sequences: 3-12 random characters (digits only in 70% of them), then up
    to 20 of random filler; the answer is the characters again.

    >>> [m["content"] for m in copies(1, seed=1)[0]]
    ['4177 yng by a rogubb', '4177']
    """
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        alphabet = DIGITS if rng.random() < 0.7 else MIXED
        target = "".join(rng.choice(alphabet) for _ in range(rng.randint(3, 12)))
        filler = "".join(rng.choice(FILLER_ALPHABET) for _ in range(rng.randint(0, 20)))
        out.append(
            [
                {"role": "user", "content": f"{target} {filler}".rstrip()},
                {"role": "assistant", "content": target},
            ]
        )
    return out


def _play(solved: SolvedTask) -> Conversation:
    """Each call of the solution and the tool's message with what it printed."""
    turns: Conversation = []
    for code, output in zip(solved.codes, solved.outputs, strict=True):
        turns += [
            {"role": "assistant", "content": python_call(code)},
            {"role": "tool", "content": output},
        ]
    return turns


def _guess(solved: SolvedTask) -> str:
    """A lazy answer without the tool: the question's first number (0 when it has none).

    Wrong, and still a copy: an answer of random digits, the first try, taught the model
    to write random digits after ``<answer>``, and it stopped copying the tool's output
    there too (0 of 36 right answers after right calls, docs/training.md).
    """
    first = re.search(r"\d+", solved.task.question)
    return f"<answer>{first.group() if first else 0}</answer>"
