"""The dashboard's wire schema: what the trainer posts, and what the page polls.

Part of the contract package: the trainer posts its step reports without importing the
server.

* ``TrainerReport`` (``POST /admin/dashboard/trainer``, admin token): one optimizer
  step's numbers and the trainer's busy spans (compute, weight push, checkpoint) since
  its last report; the training stage of the dashboard is made of them.
* ``DashboardData`` (``GET /dashboard/data``, its query ``DashboardQuery``): everything the
  page draws.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rollgym.contract.cost import CostBoard

STAGE_NAMES = ("sampling", "environment", "buffer", "training")


class TrainerReport(BaseModel):
    """One optimizer step, as the trainer saw it (times are Unix seconds; every number
    finite: the dashboard's answer must always encode)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    step: int = Field(ge=0)
    at: float = Field(description="when the step closed")
    policy_version: int = Field(ge=0, description="the server's version after the step's push")
    trajectories: int = Field(0, ge=0)
    reward_mean: float = 0.0
    success_rate: float = Field(0.0, ge=0, le=1)
    version_lag_mean: float = 0.0
    version_lag_max: int = 0
    invalid: int = Field(0, ge=0, description="invalid trajectories in the step's batch")
    dropped_total: int = Field(0, ge=0, description="trajectories the trainer did not train on")
    wait_s: float = Field(0.0, ge=0, description="the trainer waiting on the buffer")
    train_s: float = Field(0.0, ge=0)
    sync_s: float = Field(0.0, ge=0, description="the step blocked on weight pushes")
    push_s: float = Field(0.0, ge=0, description="upload and apply of the pushes that landed")
    push_wait_s: float = Field(0.0, ge=0, description="waiting for a background push")
    busy_spans: list[tuple[float, float]] = Field(
        default_factory=list,
        max_length=10_000,
        description="the training stage's busy spans (start, end) since the last report",
    )
    alarms: dict[str, float] = Field(
        default_factory=dict,
        max_length=32,
        description="the step's collapse metrics (KL behaviour||trainer, entropy, clip ratio, "
        "IS ratio percentiles, grad norm, zero-variance share; rollgym.trainer.alarms)",
    )

    @model_validator(mode="after")
    def _ordered_spans(self) -> TrainerReport:
        for start, end in self.busy_spans:
            if end < start:
                raise ValueError(f"busy span ({start}, {end}) ends before it starts")
        return self


class TrainerAccepted(BaseModel):
    step: int
    spans: int = Field(description="busy spans added to the training stage")
    cost: CostBoard | None = Field(
        None, description="the cost board with this step counted (for the trainer's trackers)"
    )


class StageTotals(BaseModel):
    busy_s: float
    waiting_s: float


class Stages(BaseModel):
    """Busy seconds per stage per time bucket; waiting = ``bucket_s`` - busy."""

    bucket_s: float
    t: list[float] = Field(description="each bucket's start")
    busy: dict[str, list[float]]
    totals: dict[str, StageTotals] = Field(description="since the server started")


class Percentiles(BaseModel):
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    count: float = 0


class Series(BaseModel):
    """Readings taken every ``interval_s`` (latency percentiles over the recent window)."""

    t: list[float] = Field(default_factory=list)
    policy_version: list[int] = Field(default_factory=list)
    buffer_ready: list[int] = Field(default_factory=list)
    buffer_leased: list[int] = Field(default_factory=list)
    inflight: list[int] = Field(default_factory=list)
    trajectories: list[float] = Field(default_factory=list)
    dropped: dict[str, list[float]] = Field(default_factory=dict)
    model_p50: list[float | None] = Field(default_factory=list)
    model_p90: list[float | None] = Field(default_factory=list)
    env_p50: list[float | None] = Field(default_factory=list)
    env_p90: list[float | None] = Field(default_factory=list)


class RewardPoint(BaseModel):
    policy_version: int
    mean: float
    count: int
    per_env: dict[str, float] = Field(
        default_factory=dict, description="each env's mean, once the server sampled two or more"
    )


class AlarmPoint(BaseModel):
    step: int
    metrics: dict[str, float]


class DashboardQuery(BaseModel):
    """``GET /dashboard/data``'s query: how finely to slice the stages and the series."""

    buckets: int = Field(60, ge=1, le=1000, description="slices of the stages' busy time")
    points: int = Field(600, ge=2, le=5000, description="readings of the series, at most")


class DashboardData(BaseModel):
    now: float
    started_at: float
    interval_s: float
    model: str
    policy_version: int
    trainer_version: int | None
    trainer_step: int | None
    totals: dict[str, float] = Field(
        description="trajectories, dropped by reason, invalid, truncated_by_context"
    )
    stages: Stages
    series: Series
    latency: dict[str, Percentiles] = Field(description="since start: model, environment...")
    version_lag: list[tuple[int, int]] = Field(description="(lag, trajectories pulled)")
    rewards: list[RewardPoint] = Field(description="mean valid return per sampling version")
    alarms: list[AlarmPoint] = Field(
        default_factory=list, description="the trainer's collapse metrics per reported step"
    )
    cost: CostBoard | None = Field(None, description="the cost board (rollgym.contract.cost)")
