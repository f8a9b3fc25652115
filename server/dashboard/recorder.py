"""``DashboardRecorder``: the four stages' spans and the server's readings over time.

Events come in from three places, each stamped on the wall clock (``time.time``):

* **sampling**: every generation the engine finishes, ``[end - model_s, end)`` (queue
  excluded), from ``server.observability.observed.ObservedEngine``;
* **environment** and the **reward curve**: every trajectory the buffer stores (groups,
  sessions, invalid episodes), its env steps placed by walking back from the episode's end
  (``created_at``) through its turns (``trainer.stages`` does the same on the trainer's
  side); episodes of groups that the runner's filter dropped never reach the buffer and are
  not in this stage;
* **buffer**: a group is waiting from its first episode's end until it is pulled (or
  dropped as stale); the version-lag histogram counts each pulled trajectory's
  ``trainer_version - min_version``;
* **training**: the trainer's own busy spans, posted after each step (``TrainerReport``).

A stage is busy while any of its spans covers the moment, waiting otherwise. ``reading``
takes the sampler's periodic ``Reading`` (buffer depth, counters, histograms); ``data``
builds the ``DashboardData`` the page polls.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import time
from collections.abc import Callable, Sequence

from rollgym.contract.dashboard import (
    STAGE_NAMES,
    Percentiles,
    RewardPoint,
    Series,
    Stages,
    StageTotals,
    TrainerReport,
)
from rollgym.contract.staleness import oldest_fresh_version, staleness
from rollgym.contract.wire import PullRequest, PullResponse, Trajectory, TrajectoryGroup
from rollgym.engine.base import Generation
from rollgym.server.buffer.observers import BufferObserver
from rollgym.server.config import DashboardConfig
from rollgym.server.dashboard.intervals import IntervalSet
from rollgym.server.dashboard.quantiles import Buckets, difference, quantile, total

MODEL, ENVIRONMENT = "model", "environment"


@dataclasses.dataclass(frozen=True)
class Reading:
    """The server's state at one instant (see ``server.dashboard.sampler``)."""

    at: float
    policy_version: int
    buffer_ready: int
    buffer_leased: int
    inflight: int
    trajectories: float
    dropped: dict[str, float]  # stale, zero_variance, too_few_valid, invalid
    histograms: dict[str, Buckets]  # cumulative: model, environment, sandbox, queue
    truncated_by_context: float = 0.0  # episodes cut by a full context (kept, marked)


@dataclasses.dataclass(frozen=True)
class _Point:
    reading: Reading
    recent: dict[str, Buckets]  # histograms over the latency window before the reading


def env_spans(trajectory: Trajectory) -> list[tuple[float, float]]:
    """Each turn's env step, placed by walking back from the episode's end."""
    spans = []
    t = trajectory.created_at
    for turn in reversed(trajectory.turns):
        spans.append((t - turn.env_s, t))
        t -= turn.env_s + turn.model_s + turn.queue_s
    return spans


class DashboardRecorder(BufferObserver):
    """See the module docstring."""

    def __init__(self, config: DashboardConfig, *, clock: Callable[[], float] = time.time):
        self.config = config
        self.clock = clock
        self.started_at = clock()
        self.stages = {name: IntervalSet() for name in STAGE_NAMES}
        self.lag_counts: collections.Counter[int] = collections.Counter()
        self.trainer_reports: collections.deque[TrainerReport] = collections.deque(
            maxlen=config.trainer_reports
        )
        self._forgotten_busy = dict.fromkeys(STAGE_NAMES, 0.0)
        self._kept_from = self.started_at
        self._waiting_groups: dict[str, tuple[float, int]] = {}  # id -> (since, min_version)
        self._rewards: dict[int, dict[str, list[float]]] = {}  # version -> env -> [sum, count]
        self._points: collections.deque[_Point] = collections.deque(
            maxlen=max(1, math.ceil(config.history_s / config.interval_s))
        )

    # --- events ---------------------------------------------------------------------------

    def _add(self, stage: str, start: float, end: float) -> None:
        self.stages[stage].add(max(start, self._kept_from), end)

    def generation(self, model_s: float, end: float | None = None) -> None:
        end = self.clock() if end is None else end
        self._add("sampling", end - model_s, end)

    def sampling_span(self, generation: Generation) -> None:
        """A generation just finished: its engine time (queue excluded) was sampling."""
        self.generation(generation.model_s)

    # --- the buffer's observer (``server.buffer.observers``) ----------------------------------

    def stored(self, group: TrajectoryGroup) -> None:
        """A group the buffer persisted: its env spans and rewards; it waits until pulled."""
        self._episodes(group.trajectories)
        since = min(t.created_at for t in group.trajectories)
        self._waiting_groups[group.group_id] = (since, group.min_version)

    def set_aside(self, trajectory: Trajectory) -> None:
        """An invalid trajectory the buffer kept: its env spans."""
        self._episodes([trajectory])

    def pulled(
        self, request: PullRequest, response: PullResponse, waited_s: Sequence[float]
    ) -> None:
        """A trainer pulled groups; groups the pull dropped as stale stop waiting too."""
        trainer_version = request.trainer_version
        now = self.clock()
        for group in response.groups:
            since, _ = self._waiting_groups.pop(
                group.group_id, (min(t.created_at for t in group.trajectories), 0)
            )
            self._add("buffer", since, now)
            for trajectory in group.trajectories:
                self.lag_counts[staleness(trainer_version, trajectory.min_version)] += 1
        oldest_kept = oldest_fresh_version(trainer_version, request.max_staleness)
        for group_id, (since, min_version) in list(self._waiting_groups.items()):
            if min_version < oldest_kept:
                self._add("buffer", since, now)
                del self._waiting_groups[group_id]

    def _episodes(self, trajectories: Sequence[Trajectory]) -> None:
        """Env spans of stored trajectories (valid or not), and the valid ones' rewards."""
        for trajectory in trajectories:
            for start, end in env_spans(trajectory):
                self._add("environment", start, end)
            if trajectory.valid:
                envs = self._rewards.setdefault(trajectory.min_version, {})
                entry = envs.setdefault(trajectory.env_id, [0.0, 0])
                entry[0] += trajectory.reward
                entry[1] += 1

    def trainer_report(self, report: TrainerReport) -> int:
        for start, end in report.busy_spans:
            self._add("training", start, end)
        self.trainer_reports.append(report)
        return len(report.busy_spans)

    def reading(self, reading: Reading) -> None:
        """One periodic reading; also forgets what fell out of the history window."""
        window_start = reading.at - self.config.latency_window_s
        base = next((p.reading for p in self._points if p.reading.at >= window_start), None)
        recent = {
            name: difference(buckets, base.histograms.get(name, ())) if base else buckets
            for name, buckets in reading.histograms.items()
        }
        self._points.append(_Point(reading, recent))
        self._forget_before(reading.at - self.config.history_s)

    def _forget_before(self, cutoff: float) -> None:
        if cutoff <= self._kept_from:
            return
        for name, spans in self.stages.items():
            self._forgotten_busy[name] += spans.covered(self._kept_from, cutoff)
            spans.forget_before(cutoff)
        self._kept_from = cutoff

    # --- views ----------------------------------------------------------------------------

    def stage_view(self, now: float, buckets: int) -> Stages:
        """Busy seconds per stage in ``buckets`` equal slices of the kept history."""
        start = self._kept_from
        width = max((now - start) / buckets, 1e-3)
        edges = [start + i * width for i in range(buckets)]
        busy: dict[str, list[float]] = {}
        totals: dict[str, StageTotals] = {}
        for name in STAGE_NAMES:
            spans = self._with_waiting_groups(now) if name == "buffer" else self.stages[name]
            busy[name] = [round(spans.covered(a, a + width), 4) for a in edges]
            busy_s = self._forgotten_busy[name] + spans.covered(start, now)
            totals[name] = StageTotals(busy_s=busy_s, waiting_s=now - self.started_at - busy_s)
        return Stages(bucket_s=width, t=edges, busy=busy, totals=totals)

    def _with_waiting_groups(self, now: float) -> IntervalSet:
        spans = IntervalSet()
        for start, end in self.stages["buffer"].intervals:
            spans.add(start, end)
        for since, _ in self._waiting_groups.values():
            spans.add(max(since, self._kept_from), now)
        return spans

    def series(self, max_points: int) -> Series:
        points = list(self._points)
        stride = max(1, math.ceil(len(points) / max_points))
        points = points[::-1][::stride][::-1]  # thin out, always keeping the latest
        out = Series()
        for point in points:
            r = point.reading
            out.t.append(r.at)
            out.policy_version.append(r.policy_version)
            out.buffer_ready.append(r.buffer_ready)
            out.buffer_leased.append(r.buffer_leased)
            out.inflight.append(r.inflight)
            out.trajectories.append(r.trajectories)
            for reason, count in r.dropped.items():
                out.dropped.setdefault(reason, []).append(count)
            model, env = point.recent.get(MODEL, ()), point.recent.get(ENVIRONMENT, ())
            out.model_p50.append(quantile(model, 0.5))
            out.model_p90.append(quantile(model, 0.9))
            out.env_p50.append(quantile(env, 0.5))
            out.env_p90.append(quantile(env, 0.9))
        return out

    def latency(self) -> dict[str, Percentiles]:
        """Percentiles since start, per histogram of the latest reading."""
        if not self._points:
            return {}
        return {
            name: Percentiles(
                p50=quantile(buckets, 0.5),
                p90=quantile(buckets, 0.9),
                p99=quantile(buckets, 0.99),
                count=total(buckets),
            )
            for name, buckets in self._points[-1].reading.histograms.items()
        }

    def latest(self) -> Reading | None:
        return self._points[-1].reading if self._points else None

    def rewards(self) -> list[RewardPoint]:
        """The mean valid return per sampling version; each env's too in a mixture."""
        mixture = len({env for envs in self._rewards.values() for env in envs}) > 1
        points = []
        for version, envs in sorted(self._rewards.items()):
            total, count = (sum(part) for part in zip(*envs.values(), strict=True))
            per_env = {env: s / n for env, (s, n) in envs.items()} if mixture else {}
            points.append(
                RewardPoint(
                    policy_version=version, mean=total / count, count=int(count), per_env=per_env
                )
            )
        return points

    def version_lags(self) -> list[tuple[int, int]]:
        return sorted(self.lag_counts.items())
