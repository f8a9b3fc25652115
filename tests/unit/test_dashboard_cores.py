"""The dashboard's pure cores: interval unions, histogram percentiles, the recorder's views."""

from __future__ import annotations

import itertools
import random

import pytest
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.registry import Collector

from rollgym.contract.dashboard import TrainerReport
from rollgym.contract.wire import (
    PullRequest,
    PullResponse,
    Trajectory,
    TrajectoryGroup,
    TurnRecord,
)
from rollgym.server.buffer.store import BufferDepth
from rollgym.server.config import DashboardConfig
from rollgym.server.dashboard.intervals import IntervalSet
from rollgym.server.dashboard.quantiles import difference, quantile, read_buckets, total
from rollgym.server.dashboard.recorder import ENVIRONMENT, DashboardRecorder, Reading, env_spans
from rollgym.server.dashboard.sampler import read_server
from rollgym.server.observability.metrics import ServerMetrics
from rollgym.trainer.stages import covered as trainer_covered

# --- IntervalSet ---------------------------------------------------------------------------


def test_overlapping_and_touching_spans_merge() -> None:
    spans = IntervalSet()
    for start, end in [(5, 6), (0, 2), (1, 3), (3, 4), (8, 9), (4.5, 5.5), (7, 7)]:
        spans.add(start, end)
    assert spans.intervals == [(0, 4), (4.5, 6), (8, 9)]
    assert spans.covered(2, 8.5) == pytest.approx(2 + 1.5 + 0.5)
    assert spans.covered(6, 8) == 0.0


@pytest.mark.parametrize("seed", range(5))
def test_covered_time_equals_the_trainers_union_of_the_raw_spans(seed: int) -> None:
    rng = random.Random(seed)
    raw = []
    spans = IntervalSet()
    for _ in range(300):
        start = rng.uniform(0, 100)
        span = (start, start + rng.expovariate(2.0))
        raw.append(span)
        spans.add(*span)
    for _ in range(50):
        a = rng.uniform(-10, 110)
        b = a + rng.uniform(0, 40)
        assert spans.covered(a, b) == pytest.approx(trainer_covered(raw, a, b))
    starts = [s for s, _ in spans.intervals]
    assert starts == sorted(starts)
    pairs = itertools.pairwise(spans.intervals)
    assert all(e1 < s2 for (_, e1), (s2, _) in pairs)


def test_forgetting_cuts_at_the_instant() -> None:
    spans = IntervalSet()
    for span in [(0, 1), (2, 5), (6, 7)]:
        spans.add(*span)
    spans.forget_before(3)
    assert spans.intervals == [(3, 5), (6, 7)]


# --- histogram percentiles ----------------------------------------------------------------

BOUNDS = (0.001, 0.01, 0.1, 1.0, 10.0)


def _histogram() -> tuple[CollectorRegistry, Histogram]:
    registry = CollectorRegistry()
    return registry, Histogram("t_seconds", "test", registry=registry, buckets=BOUNDS)


def test_quantiles_land_in_the_right_bucket() -> None:
    registry, histogram = _histogram()
    for _ in range(90):
        histogram.observe(0.05)  # (0.01, 0.1]
    for _ in range(10):
        histogram.observe(5.0)  # (1, 10]
    buckets = read_buckets(registry, "t_seconds")
    assert total(buckets) == 100
    assert 0.01 < quantile(buckets, 0.5) <= 0.1
    assert 0.01 < quantile(buckets, 0.9) <= 0.1
    assert 1.0 < quantile(buckets, 0.95) <= 10.0


def test_a_value_past_the_last_bound_reads_as_the_last_bound() -> None:
    registry, histogram = _histogram()
    histogram.observe(60.0)
    assert quantile(read_buckets(registry, "t_seconds"), 0.5) == 10.0


def test_no_observations_no_quantile() -> None:
    registry, _ = _histogram()
    assert quantile(read_buckets(registry, "t_seconds"), 0.5) is None
    assert read_buckets(registry, "no_such_histogram") == ()


class CountingCollector(Collector):
    def __init__(self) -> None:
        self.collections = 0

    def collect(self):  # type: ignore[no-untyped-def]
        self.collections += 1
        return iter(())


def test_a_reading_collects_the_registry_once() -> None:
    """Each collection runs every collector (the cost board's is costly): one per reading."""
    metrics = ServerMetrics()
    metrics.trajectories.labels(source="session").inc(3)
    metrics.dropped.labels(reason="stale").inc(2)
    metrics.env_step.observe(0.2)
    counting = CountingCollector()
    metrics.registry.register(counting)
    reading = read_server(metrics.registry, 4, BufferDepth(ready=1), at=0.0)
    assert counting.collections == 1
    assert reading.trajectories == 3 and reading.dropped["stale"] == 2
    assert total(reading.histograms[ENVIRONMENT]) == 1 and reading.policy_version == 4


def test_a_window_is_the_difference_of_two_readings() -> None:
    registry, histogram = _histogram()
    for _ in range(100):
        histogram.observe(5.0)
    before = read_buckets(registry, "t_seconds")
    for _ in range(10):
        histogram.observe(0.005)
    recent = difference(read_buckets(registry, "t_seconds"), before)
    assert total(recent) == 10
    assert 0.001 < quantile(recent, 0.99) <= 0.01  # the old slow ones are out of the window


# --- the recorder -------------------------------------------------------------------------


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _trajectory(
    group: str, end: float, turns: list[tuple[float, float]], *, version: int = 0, reward=1.0
) -> Trajectory:
    """``turns``: (model_s, env_s) per turn; the episode ends at ``end``."""
    records = [
        TurnRecord(
            index=i,
            policy_version=version,
            context_tokens=1,
            completion_tokens=1,
            env_tokens=0,
            model_s=model_s,
            env_s=env_s,
        )
        for i, (model_s, env_s) in enumerate(turns)
    ]
    n = len(turns)
    return Trajectory(
        id=f"{group}-{end}",
        group_id=group,
        env_id="x",
        prompt_ids=[1],
        completion_ids=[2] * n,
        logprobs=[0.0] * n,
        loss_mask=[1] * n,
        reward=reward,
        terminated=True,
        truncated=False,
        min_version=version,
        max_version=version,
        turns=records,
        created_at=end,
    )


def _group(group_id: str, *trajectories: Trajectory) -> TrajectoryGroup:
    return TrajectoryGroup(group_id=group_id, env_id="x", trajectories=list(trajectories))


def _reading(at: float, histograms=None, **overrides) -> Reading:
    values = {
        "at": at,
        "policy_version": 0,
        "buffer_ready": 0,
        "buffer_leased": 0,
        "inflight": 0,
        "trajectories": 0.0,
        "dropped": {"stale": 0.0},
        "histograms": histograms or {},
    }
    return Reading(**{**values, **overrides})


def test_env_spans_walk_back_from_the_episodes_end() -> None:
    trajectory = _trajectory("g", 10.0, [(1.0, 0.5), (2.0, 0.25)])
    assert env_spans(trajectory) == [(9.75, 10.0), (7.25, 7.75)]


def test_stage_view_splits_busy_time_into_buckets() -> None:
    clock = Clock(1000.0)
    recorder = DashboardRecorder(DashboardConfig(), clock=clock)
    recorder.generation(2.0, end=1003.0)  # sampling busy [1001, 1003)
    recorder.generation(1.0, end=1002.5)  # inside the first: no double counting
    clock.now = 1010.0
    view = recorder.stage_view(clock.now, buckets=5)
    assert view.bucket_s == pytest.approx(2.0)
    assert view.busy["sampling"] == pytest.approx([1.0, 1.0, 0.0, 0.0, 0.0])
    assert view.totals["sampling"].busy_s == pytest.approx(2.0)
    assert view.totals["sampling"].waiting_s == pytest.approx(8.0)
    assert view.totals["training"].busy_s == 0.0


def test_buffer_waits_from_episode_end_until_pull_and_lags_are_counted() -> None:
    clock = Clock(1000.0)
    recorder = DashboardRecorder(DashboardConfig(), clock=clock)
    recorder.stored(_group("a", _trajectory("a", 1002.0, [(0.5, 0.1)], version=3)))
    recorder.stored(_group("b", _trajectory("b", 1004.0, [(0.5, 0.1)], version=1)))
    clock.now = 1006.0
    waiting = recorder.stage_view(clock.now, buckets=1)
    assert waiting.totals["buffer"].busy_s == pytest.approx(4.0)  # open since 1002
    group_a = _group("a", _trajectory("a", 1002.0, [(0.5, 0.1)], version=3))
    pull = PullRequest(trainer_version=4, max_staleness=2, num_groups=1)
    answer = PullResponse(lease_id="l", groups=[group_a], dropped_stale=1, policy_version=4)
    recorder.pulled(pull, answer, waited_s=[4.0])  # b (v1) is stale: closed
    clock.now = 1020.0
    done = recorder.stage_view(clock.now, buckets=1)
    assert done.totals["buffer"].busy_s == pytest.approx(4.0)  # nothing waits after 1006
    assert recorder.version_lags() == [(1, 1)]


def test_rewards_average_valid_returns_per_sampling_version() -> None:
    recorder = DashboardRecorder(DashboardConfig(), clock=Clock())
    recorder.stored(
        TrajectoryGroup(
            group_id="a",
            env_id="e",
            trajectories=[
                _trajectory("a", 1.0, [(0.1, 0.1)], version=0, reward=1.0),
                _trajectory("a", 1.0, [(0.1, 0.1)], version=0, reward=0.0),
            ],
        )
    )
    recorder.stored(_group("b", _trajectory("b", 1.0, [(0.1, 0.1)], version=1, reward=0.5)))
    invalid = _trajectory("c", 1.0, [(0.1, 0.1)], version=1, reward=0.0)
    recorder.set_aside(invalid.model_copy(update={"valid": False, "invalid_reason": "box died"}))
    assert [(p.policy_version, p.mean, p.count) for p in recorder.rewards()] == [
        (0, 0.5, 2),
        (1, 0.5, 1),
    ]


def test_a_mixtures_rewards_are_also_split_by_env() -> None:
    """One env: no per-env part (the curve is the env's); two: each env's mean per version,
    missing where a version sampled none of it."""
    recorder = DashboardRecorder(DashboardConfig(), clock=Clock())
    recorder.stored(_group("a", _trajectory("a", 1.0, [(0.1, 0.1)], version=0, reward=1.0)))
    assert recorder.rewards()[0].per_env == {}
    hard = _trajectory("b", 1.0, [(0.1, 0.1)], version=0, reward=0.0)
    recorder.stored(_group("b", hard.model_copy(update={"env_id": "hard"})))
    recorder.stored(_group("c", _trajectory("c", 1.0, [(0.1, 0.1)], version=1, reward=0.5)))
    assert [(p.policy_version, p.mean, p.per_env) for p in recorder.rewards()] == [
        (0, 0.5, {"x": 1.0, "hard": 0.0}),
        (1, 0.5, {"x": 0.5}),
    ]


def test_trainer_reports_make_the_training_stage() -> None:
    clock = Clock(1000.0)
    recorder = DashboardRecorder(DashboardConfig(), clock=clock)
    report = TrainerReport(step=1, at=1004.0, policy_version=2, busy_spans=[(1001, 1003)])
    assert recorder.trainer_report(report) == 1
    clock.now = 1010.0
    assert recorder.stage_view(clock.now, buckets=2).totals["training"].busy_s == 2.0


def test_latency_series_cover_the_recent_window_only() -> None:
    registry, histogram = _histogram()
    config = DashboardConfig(interval_s=1.0, latency_window_s=10.0)
    recorder = DashboardRecorder(config, clock=Clock(0.0))
    for _ in range(50):
        histogram.observe(5.0)
    recorder.reading(_reading(0.0, {"model": read_buckets(registry, "t_seconds")}))
    for _ in range(50):
        histogram.observe(0.005)
    recorder.reading(_reading(5.0, {"model": read_buckets(registry, "t_seconds")}))
    series = recorder.series(max_points=100)
    assert series.t == [0.0, 5.0]
    assert 1.0 < series.model_p50[0] <= 10.0
    assert 0.001 < series.model_p90[1] <= 0.01  # the window starts at the first reading
    since_start = recorder.latency()["model"]
    assert since_start.count == 100 and 1.0 < since_start.p90 <= 10.0


def test_history_is_bounded_and_forgotten_busy_time_still_counts() -> None:
    clock = Clock(0.0)
    config = DashboardConfig(interval_s=1.0, history_s=10.0)
    recorder = DashboardRecorder(config, clock=clock)
    recorder.generation(4.0, end=5.0)
    for t in range(0, 31):
        clock.now = float(t)
        recorder.reading(_reading(float(t)))
    assert len(recorder.series(max_points=1000).t) == 10
    assert recorder.stages["sampling"].intervals == []
    assert recorder.stage_view(30.0, buckets=3).totals["sampling"].busy_s == pytest.approx(4.0)
    thinned = recorder.series(max_points=4)
    assert len(thinned.t) <= 4 and thinned.t[-1] == 30.0
