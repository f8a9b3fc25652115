"""Live progress of a run: per-step records, the four stages' shares, latencies, a table.

``RunProgress`` is fed by the pieces of the loop (the group feed, the weight push, the
checkpoint callback) and closes one ``StepRecord`` per optimizer step. ``render`` draws the
table ``rollgym run`` prints; ``StepLog`` appends the records to ``steps.jsonl`` so that a
resumed run's plot covers the steps before the interruption too.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from rollgym.contract.staleness import staleness
from rollgym.contract.wire import Trajectory, TrajectoryGroup
from rollgym.trainer.stages import STAGES, Stage, StageShare, StageTimeline

_LATENCY_SAMPLES = 20_000


def succeeded(trajectory: Trajectory) -> bool:
    """An episode succeeds when the env ended it (``terminated``) with a positive return."""
    return trajectory.valid and trajectory.terminated and trajectory.reward > 0


class EnvStep(BaseModel):
    """One env's part of a step's batch (a mixture of envs has several)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trajectories: int
    reward_mean: float
    success_rate: float


class StepRecord(BaseModel):
    """What one optimizer step consumed and cost (a line of ``steps.jsonl``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    step: int
    at: float
    policy_version: int
    trajectories: int
    reward_mean: float
    success_rate: float
    version_lag_mean: float
    version_lag_max: int
    invalid: int
    dropped_total: int
    # groups the server dropped before any pull (rewards all equal, or under 2 valid),
    # so far in its rollout job: a policy that wins or loses every episode of a group waits here
    filtered_groups: int = 0
    wait_s: float
    train_s: float
    sync_s: float  # the step blocked on pushes (a background push: its snapshot and wait)
    push_s: float = 0.0  # upload, apply and canary of the pushes that landed in the step
    push_wait_s: float = 0.0  # of sync_s: waiting for the previous background push
    alarms: dict[str, float] = {}  # the step's collapse metrics (trainer.alarms)
    per_env: dict[str, EnvStep] = {}  # by the env each group played


@dataclasses.dataclass
class _Batch:
    rewards: list[float] = dataclasses.field(default_factory=list)
    successes: int = 0
    lags: list[int] = dataclasses.field(default_factory=list)
    invalid: int = 0
    wait_s: float = 0.0
    train_s: float = 0.0
    sync_s: float = 0.0
    push_s: float = 0.0
    push_wait_s: float = 0.0
    env_rewards: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    env_successes: dict[str, int] = dataclasses.field(default_factory=dict)


class RunProgress:
    """Collects the run's numbers; every hook takes wall-clock (``time.time``) instants."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.started_at = clock()
        self.timeline = StageTimeline()
        self.steps: list[StepRecord] = []
        self.model_s: deque[float] = deque(maxlen=_LATENCY_SAMPLES)
        self.env_s: deque[float] = deque(maxlen=_LATENCY_SAMPLES)
        self.sandbox_s: deque[float] = deque(maxlen=_LATENCY_SAMPLES)  # turns that used a box
        self.sync_s: list[float] = []
        self.trl_logs: dict[str, float] = {}
        self._batch = _Batch()

    # --- hooks ----------------------------------------------------------------------------

    def on_wait(self, start: float, end: float) -> None:
        """The trainer waited on the buffer (a pull that had to long-poll)."""
        self._batch.wait_s += end - start

    def on_groups(self, groups: Sequence[TrajectoryGroup], trainer_version: int) -> None:
        """Groups accepted for the coming step, pulled now."""
        pulled_at = self.clock()
        batch = self._batch
        for group in groups:
            env = group.env_id
            batch.env_rewards.setdefault(env, []).extend(t.reward for t in group.trajectories)
            batch.env_successes[env] = batch.env_successes.get(env, 0) + sum(
                map(succeeded, group.trajectories)
            )
            for trajectory in group.trajectories:
                self.timeline.add_episode(trajectory, pulled_at)
                batch.rewards.append(trajectory.reward)
                batch.successes += succeeded(trajectory)
                batch.lags.append(staleness(trainer_version, trajectory.min_version))
                batch.invalid += not trajectory.valid
                self.model_s.extend(turn.model_s for turn in trajectory.turns)
                self.env_s.extend(turn.env_s for turn in trajectory.turns)
                self.sandbox_s.extend(t.sandbox_s for t in trajectory.turns if t.sandbox_s > 0)

    def turn_latency(self) -> dict[str, tuple[float, float, float]]:
        """p50, p90, p99 seconds of the recent turns: the model's, the environment's, and
        (where turns used a box) the sandbox's part of the environment's."""
        latency = {"model": percentiles(self.model_s), "environment": percentiles(self.env_s)}
        if self.sandbox_s:
            latency["sandbox"] = percentiles(self.sandbox_s)
        return latency

    def on_busy(self, start: float, end: float, *, kind: str = "train") -> None:
        """The trainer computed (``train``), pushed weights (``sync``) or checkpointed."""
        self.timeline.add("training", start, end)
        if kind == "train":
            self._batch.train_s += end - start
        elif kind == "sync":
            self._batch.sync_s += end - start
            self.sync_s.append(end - start)

    def on_push(self, *, landed_s: float = 0.0, waited_s: float = 0.0) -> None:
        """A push landed after ``landed_s`` of upload and apply; the step waited ``waited_s``
        for a background push before its own (``trainer.background_push``)."""
        self._batch.push_s += landed_s
        self._batch.push_wait_s += waited_s

    def on_trl_logs(self, logs: dict[str, float]) -> None:
        """TRL's own metrics of the last step (loss, importance-sampling ratio, entropy)."""
        self.trl_logs = logs

    def add_alarms(self, alarms: dict[str, float]) -> StepRecord:
        """Complete the last step's record with its collapse metrics (finite ones only:
        TRL logs them after the step has closed)."""
        finite = {k: v for k, v in alarms.items() if math.isfinite(v)}
        self.steps[-1] = self.steps[-1].model_copy(update={"alarms": finite})
        return self.steps[-1]

    def end_step(
        self, *, step: int, policy_version: int, dropped_total: int, filtered_groups: int = 0
    ) -> StepRecord:
        batch, self._batch = self._batch, _Batch()
        n = len(batch.rewards)
        record = StepRecord(
            step=step,
            at=self.clock(),
            policy_version=policy_version,
            trajectories=n,
            reward_mean=statistics.fmean(batch.rewards) if n else 0.0,
            success_rate=batch.successes / n if n else 0.0,
            version_lag_mean=statistics.fmean(batch.lags) if batch.lags else 0.0,
            version_lag_max=max(batch.lags, default=0),
            invalid=batch.invalid,
            dropped_total=dropped_total,
            filtered_groups=filtered_groups,
            wait_s=batch.wait_s,
            train_s=batch.train_s,
            sync_s=batch.sync_s,
            push_s=batch.push_s,
            push_wait_s=batch.push_wait_s,
            per_env={
                env: EnvStep(
                    trajectories=len(rewards),
                    reward_mean=statistics.fmean(rewards),
                    success_rate=batch.env_successes[env] / len(rewards),
                )
                for env, rewards in batch.env_rewards.items()
                if rewards
            },
        )
        self.steps.append(record)
        return record

    # --- views ----------------------------------------------------------------------------

    def stage_shares(self) -> dict[Stage, StageShare]:
        """Busy and waiting time of the four stages since this session started."""
        return self.timeline.shares(self.started_at, self.clock())

    def render(self, *, total_steps: int) -> str:
        """The live table: headline, the four stages, latencies (plain text)."""
        last = self.steps[-1] if self.steps else None
        elapsed = self.clock() - self.started_at
        lines = [_headline(last, total_steps, elapsed)]
        if last is not None and len(last.per_env) > 1:  # a mixture: each env's part
            lines.extend(
                f"  {env:<28} reward {part.reward_mean:.2f}  success "
                f"{100 * part.success_rate:.0f}%  ({part.trajectories} episodes)"
                for env, part in sorted(last.per_env.items())
            )
        lines.append(f"  {'stage':<12}{'busy':>9}{'waiting':>10}{'busy %':>8}")
        for stage, share in self.stage_shares().items():
            lines.append(
                f"  {stage:<12}{share.busy_s:>8.1f}s{share.waiting_s:>9.1f}s"
                f"{100 * share.busy_share:>7.0f}%"
            )
        lines.append(f"  {'per turn':<12}{'p50':>9}{'p90':>10}{'p99':>10}")
        for name, cuts in self.turn_latency().items():
            widths = zip(cuts, (7, 8, 8), strict=True)
            label = "  sandbox" if name == "sandbox" else name  # a part of the environment's
            lines.append(f"  {label:<12}" + "".join(f"{q * 1e3:>{w}.1f}ms" for q, w in widths))
        if trl := _trl_line(self.trl_logs):
            lines.append(trl)
        if last is not None and last.alarms:
            lines.append(_alarm_line(last.alarms))
        if self.sync_s:
            lines.append(
                f"  weight sync  last {self.sync_s[-1] * 1e3:.0f}ms, "
                f"mean {statistics.fmean(self.sync_s) * 1e3:.0f}ms over {len(self.sync_s)}"
            )
        return "\n".join(lines)


def _headline(last: StepRecord | None, total_steps: int, elapsed: float) -> str:
    clock = f"{int(elapsed // 60)}m{int(elapsed % 60):02d}s"
    if last is None:
        return f"step 0/{total_steps}  elapsed {clock}  (waiting for the first batch)"
    return (
        f"step {last.step}/{total_steps}  version {last.policy_version}  elapsed {clock}  "
        f"reward {last.reward_mean:.2f}  success {100 * last.success_rate:.0f}%  "
        f"lag {last.version_lag_mean:.1f} (max {last.version_lag_max})  "
        f"dropped {last.dropped_total}  filtered {last.filtered_groups}  invalid {last.invalid}"
    )


_TRL_METRICS = (
    ("loss", "loss"),
    ("sampling/importance_sampling_ratio/mean", "IS ratio"),
    ("entropy", "entropy"),
    ("grad_norm", "grad norm"),
)


def _trl_line(logs: dict[str, float]) -> str:
    shown = [f"{label} {logs[key]:.3g}" for key, label in _TRL_METRICS if key in logs]
    return "  TRL: " + ", ".join(shown) if shown else ""


def _alarm_line(alarms: dict[str, float]) -> str:
    """The collapse metrics of the step (``trainer.alarms``)."""
    shown = [
        ("KL(b||t)", "kl_behaviour", ".4f"),
        ("IS p01/p50/p99", ("is_ratio_p01", "is_ratio_p50", "is_ratio_p99"), ".2f"),
        ("clip", "clip_ratio", ".3f"),
        ("zero-var groups", "zero_variance_groups", ".2f"),
        ("step KL", "step_kl", ".4f"),
    ]
    parts = []
    for label, keys, spec in shown:
        keys = (keys,) if isinstance(keys, str) else keys
        if all(k in alarms for k in keys):
            parts.append(f"{label} " + "/".join(format(alarms[k], spec) for k in keys))
    return "  alarms: " + ", ".join(parts)


def percentiles(values: Sequence[float] | deque[float]) -> tuple[float, float, float]:
    """p50, p90 and p99 of ``values`` (0.0 for none).

    >>> percentiles([float(v) for v in range(1, 101)])
    (50.5, 90.1, 99.01)
    """
    if len(values) < 2:
        only = values[0] if values else 0.0
        return only, only, only
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return statistics.median(values), round(cuts[89], 6), round(cuts[98], 6)


class StepLog:
    """``steps.jsonl``: one ``StepRecord`` per line, cut back to a checkpoint on resume."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, record: StepRecord) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as handle:
            handle.write(record.model_dump_json() + "\n")

    def read(self, *, up_to_step: int | None = None) -> list[StepRecord]:
        if not self.path.is_file():
            return []
        records = [
            StepRecord.model_validate(json.loads(line))
            for line in self.path.read_text().splitlines()
            if line.strip()
        ]
        return [r for r in records if up_to_step is None or r.step <= up_to_step]

    def truncate(self, *, up_to_step: int) -> list[StepRecord]:
        """Keep the records of steps ``<= up_to_step`` (a resume rolls back to there)."""
        kept = self.read(up_to_step=up_to_step)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("".join(r.model_dump_json() + "\n" for r in kept))
        return kept


__all__ = ["STAGES", "RunProgress", "StepLog", "StepRecord", "succeeded"]
