"""The export schema: one ``DataRow`` per trajectory, and its Hugging Face ``Features``.

A row is a trajectory made portable: where it came from (env, task seed, policy
versions, how it left the server), how it went (reward, validity, end), the exact
training data (token ids, behaviour logprobs, loss mask: model tokens 1, environment
tokens 0) and the conversation as text in the OpenAI chat format (``messages`` and
``tools``, the latter a JSON string since tool schemas differ in shape).

``outcome`` says how the row reached the export: ``generated`` (sampled by
``rollgym generate``), ``trained`` (a trainer acked it), ``stale`` (the staleness window
dropped it) or ``invalid`` (an infrastructure failure; never trained on).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from rollgym.contract.chat import chat_record
from rollgym.contract.wire import Trajectory

RowOutcome = Literal["generated", "trained", "stale", "invalid"]


class DataRow(BaseModel):
    """One exported trajectory (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    group_id: str
    env_id: str
    task_seed: int | None
    source: str
    outcome: RowOutcome
    policy_version: int
    max_policy_version: int
    reward: float
    valid: bool
    invalid_reason: str | None
    terminated: bool
    truncated: bool
    turns: int
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    loss_mask: list[int]
    messages: list[dict[str, Any]]
    tools: str | None
    created_at: float


def row_of(trajectory: Trajectory, outcome: RowOutcome) -> DataRow:
    """The row of ``trajectory``; ``policy_version`` is its lowest (the staleness rule's)."""
    messages: list[dict[str, Any]] = []
    if trajectory.messages:
        said = [{"role": m.role, "content": m.content} for m in trajectory.messages]
        messages = chat_record(said).model_dump(exclude_none=True)["messages"]
    # the trajectory was validated when it was made: construct without validating again
    return DataRow.model_construct(
        id=trajectory.id,
        group_id=trajectory.group_id,
        env_id=trajectory.env_id,
        task_seed=trajectory.task_seed,
        source=trajectory.source,
        outcome=outcome,
        policy_version=trajectory.min_version,
        max_policy_version=trajectory.max_version,
        reward=trajectory.reward,
        valid=trajectory.valid,
        invalid_reason=trajectory.invalid_reason,
        terminated=trajectory.terminated,
        truncated=trajectory.truncated,
        turns=len(trajectory.turns),
        prompt_ids=trajectory.prompt_ids,
        completion_ids=trajectory.completion_ids,
        logprobs=trajectory.logprobs,
        loss_mask=trajectory.loss_mask,
        messages=messages,
        tools=json.dumps(trajectory.tools) if trajectory.tools else None,
        created_at=trajectory.created_at,
    )


def features() -> Any:
    """The rows' ``datasets.Features``: fixed, so an empty export has the same schema."""
    from datasets import Features, List, Value

    call = {
        "id": Value("string"),
        "type": Value("string"),
        "function": {"name": Value("string"), "arguments": Value("string")},
    }
    message = {
        "role": Value("string"),
        "content": Value("string"),
        "tool_calls": List(call),
        "tool_call_id": Value("string"),
    }
    return Features(
        {
            "id": Value("string"),
            "group_id": Value("string"),
            "env_id": Value("string"),
            "task_seed": Value("int64"),
            "source": Value("string"),
            "outcome": Value("string"),
            "policy_version": Value("int64"),
            "max_policy_version": Value("int64"),
            "reward": Value("float64"),
            "valid": Value("bool"),
            "invalid_reason": Value("string"),
            "terminated": Value("bool"),
            "truncated": Value("bool"),
            "turns": Value("int64"),
            "prompt_ids": List(Value("int32")),
            "completion_ids": List(Value("int32")),
            "logprobs": List(Value("float32")),
            "loss_mask": List(Value("int8")),
            "messages": List(message),
            "tools": Value("string"),
            "created_at": Value("float64"),
        }
    )


def columns(rows: Sequence[DataRow]) -> dict[str, list[Any]]:
    """Rows as columns (``Dataset.from_dict`` is much faster than a list of dicts)."""
    names = list(DataRow.model_fields)
    out: dict[str, list[Any]] = {name: [] for name in names}
    for row in rows:
        for name in names:
            out[name].append(getattr(row, name))
    return out
