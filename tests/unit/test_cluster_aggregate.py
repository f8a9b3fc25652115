"""One view of many servers: the dashboard's data merged, metrics relabelled."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rollgym.cluster.aggregate import merge_dashboards, merge_stages, relabel
from rollgym.contract.dashboard import (
    DashboardData,
    Percentiles,
    RewardPoint,
    Series,
    Stages,
    StageTotals,
)


def view(offset: float, busy: float, ready: int, p50: float, reward: float) -> DashboardData:
    return DashboardData(
        now=100.0 + offset, started_at=offset, interval_s=2.0, model="m", policy_version=3,
        trainer_version=3, trainer_step=5, totals={"trajectories": 10.0, "stale": 1.0},
        stages=Stages(
            bucket_s=50.0, t=[offset, offset + 50.0], busy={"sampling": [busy, busy]},
            totals={"sampling": StageTotals(busy_s=2 * busy, waiting_s=100 - 2 * busy)},
        ),
        series=Series(
            t=[offset + 10, offset + 20], policy_version=[2, 3], buffer_ready=[ready, ready],
            buffer_leased=[0, 0], inflight=[1, 1], trajectories=[5.0, 10.0],
            dropped={"stale": [0.0, 1.0]}, model_p50=[p50, p50], model_p90=[None, None],
            env_p50=[None, None], env_p90=[None, None],
        ),
        latency={"model": Percentiles(p50=p50, p90=2 * p50, p99=3 * p50, count=10)},
        version_lag=[(0, 4), (1, 2)],
        rewards=[RewardPoint(policy_version=3, mean=reward, count=10)],
    )  # fmt: skip


def test_counts_add_up_and_the_slowest_server_shows() -> None:
    merged = merge_dashboards([view(0, 10, 2, 0.1, 1.0), view(0, 30, 3, 0.3, 0.0)], 7)
    assert merged.policy_version == 7
    assert merged.totals == {"trajectories": 20.0, "stale": 2.0}
    assert merged.series.buffer_ready == [5, 5] and merged.series.trajectories == [10.0, 20.0]
    assert merged.series.model_p50 == [0.3, 0.3] and merged.series.model_p90 == [None, None]
    assert merged.latency["model"].p50 == 0.3 and merged.latency["model"].count == 20
    assert merged.version_lag == [(0, 8), (1, 4)]
    assert merged.rewards == [RewardPoint(policy_version=3, mean=0.5, count=20)]


def test_stage_busy_time_is_the_mean_per_server_on_one_grid() -> None:
    merged = merge_stages([view(0, 10, 0, 0.1, 0).stages, view(0, 30, 0, 0.1, 0).stages])
    assert merged.bucket_s == pytest.approx(50.0)
    assert merged.busy["sampling"] == pytest.approx([20.0, 20.0])
    assert merged.totals["sampling"].busy_s == pytest.approx(40.0)
    # a server that started later is spread over the shared grid by overlap
    late = merge_stages([view(0, 10, 0, 0.1, 0).stages, view(50, 10, 0, 0.1, 0).stages])
    assert sum(late.busy["sampling"]) == pytest.approx(20.0)


def test_relabelled_metrics_parse_and_keep_every_server() -> None:
    text = '# TYPE rollgym_x counter\nrollgym_x_total{kind="a"} 2.0\n'
    merged = relabel({"s0": text, "s1": text})
    samples = [s for f in text_string_to_metric_families(merged) for s in f.samples]
    assert {(s.labels["server"], s.labels["kind"], s.value) for s in samples} == {
        ("s0", "a", 2.0),
        ("s1", "a", 2.0),
    }
