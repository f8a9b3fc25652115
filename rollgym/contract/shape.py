"""The run's shape, declared once: samples per group, groups per step, and how stale a sample
may be.

Three places hold it, and they must agree for a run to train on what it samples: the
trainer's config (``TrainerConfig``), the server's rollout job (``RolloutJob``) and the
sessions' window when no job runs (``SessionConfig``). The first two are a ``RunShape``
(same fields, bounds and defaults); the sessions' config takes the same field types.
``rollgym train`` reads the server's job before it starts and refuses a job of another
shape (``differences``).

    >>> shape = RunShape(group_size=8, groups_per_batch=4, max_staleness=1)
    >>> shape.batch_size, shape.mode
    (32, 'async')
    >>> shape.differences(RunShape(group_size=4, groups_per_batch=8, max_staleness=1))
    ['group_size 8, not 4', 'groups_per_batch 4, not 8']
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

MAX_GROUP_SIZE = 1024

GroupSize = Annotated[
    int, Field(ge=1, le=MAX_GROUP_SIZE, description="samples per task that GRPO compares")
]
GroupsPerBatch = Annotated[
    int, Field(ge=1, le=4096, description="groups the trainer consumes per optimizer step")
]
MaxStaleness = Annotated[
    int,
    Field(
        ge=0,
        le=1000,
        description="versions a sample may lag the trainer (0: synchronous; >= 1: asynchronous)",
    ),
]

FIELDS = ("group_size", "groups_per_batch", "max_staleness")


class RunShape(BaseModel):
    """The shape's three numbers (see the module docstring)."""

    group_size: GroupSize = 8
    groups_per_batch: GroupsPerBatch = 4
    max_staleness: MaxStaleness = 1

    @property
    def batch_size(self) -> int:
        """Trajectories per optimizer step."""
        return self.group_size * self.groups_per_batch

    @property
    def mode(self) -> Literal["sync", "async"]:
        return "sync" if self.max_staleness == 0 else "async"

    def differences(self, other: RunShape) -> list[str]:
        """Each number of this shape that ``other`` does not share, as ``name this, not that``."""
        return [
            f"{name} {getattr(self, name)}, not {getattr(other, name)}"
            for name in FIELDS
            if getattr(self, name) != getattr(other, name)
        ]
