"""From trajectories to rows: filter by validity and reward, deduplicate, count what went.

``curate(items, config)`` takes ``(trajectory, outcome)`` pairs in sampling order and
returns the rows to export with a ``CurationReport`` of how many each step removed; the
filters run first (cheap), then exact deduplication, then near deduplication (see
``rollgym.data.dedup``).

    >>> CurateConfig(min_reward=0.5).admits(valid=True, reward=1.0)
    True
    >>> CurateConfig().admits(valid=False, reward=1.0)
    False
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rollgym.contract.wire import Trajectory
from rollgym.data.dedup import Deduplicator, MinHasher, Scope
from rollgym.data.rows import DataRow, RowOutcome, row_of


class CurateConfig(BaseModel):
    """What to keep: filters and deduplication."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    valid_only: bool = Field(True, description="drop infrastructure failures")
    min_reward: float | None = Field(None, description="keep rewards >= this")
    max_reward: float | None = Field(None, description="keep rewards <= this")
    exact_dedup: bool = True
    near_dedup: bool = True
    near_threshold: float = Field(0.8, gt=0, le=1, description="Jaccard similarity of actions")
    near_scope: Scope = Field("prompt", description="compare within a first prompt, or all")
    shingle: int = Field(3, ge=1, description="tokens per shingle")

    @model_validator(mode="after")
    def _bounds(self) -> CurateConfig:
        if (
            self.min_reward is not None
            and self.max_reward is not None
            and self.min_reward > self.max_reward
        ):
            raise ValueError(f"min_reward {self.min_reward} > max_reward {self.max_reward}")
        return self

    def admits(self, *, valid: bool, reward: float) -> bool:
        if self.valid_only and not valid:
            return False
        if self.min_reward is not None and reward < self.min_reward:
            return False
        return self.max_reward is None or reward <= self.max_reward


@dataclasses.dataclass
class CurationReport:
    seen: int = 0
    filtered: int = 0
    exact_duplicates: int = 0
    near_duplicates: int = 0
    kept: int = 0


def curate(
    items: Iterable[tuple[Trajectory, RowOutcome]], config: CurateConfig
) -> tuple[list[DataRow], CurationReport]:
    """The rows worth keeping (see the module docstring)."""
    report = CurationReport()
    dedup = Deduplicator(
        exact=config.exact_dedup,
        near=config.near_dedup,
        threshold=config.near_threshold,
        scope=config.near_scope,
        hasher=MinHasher(shingle=config.shingle),
    )
    rows = []
    for trajectory, outcome in items:
        report.seen += 1
        if not config.admits(valid=trajectory.valid, reward=trajectory.reward):
            report.filtered += 1
            continue
        if dedup.keep(trajectory.prompt_ids, trajectory.completion_ids, trajectory.loss_mask):
            rows.append(row_of(trajectory, outcome))
    report.exact_duplicates = dedup.exact_dropped
    report.near_duplicates = dedup.near_dropped
    report.kept = len(rows)
    return rows, report
