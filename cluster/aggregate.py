"""One view of many servers: ``/metrics`` and the dashboard's data, made of every server's.

* **Metrics.** Each server's Prometheus exposition, every sample labelled with its
  ``server`` (what Prometheus federation does: ``sum by (...)`` gives the cluster's
  totals, and each server stays visible), after the router's own metrics.
* **Dashboard.** Counts add up (trajectories, drops, buffer depth, episodes in flight,
  version lags, rewards weighted by their counts). Stage busy time is the *mean* over
  servers, on a common time grid, so that "busy + waiting = the bucket" still holds per
  server. Latency percentiles cannot be added: the view shows the slowest server's (the
  per-server ones are in ``/metrics``). The version is the cluster's.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Sequence

from prometheus_client.parser import text_string_to_metric_families

from rollgym.contract.dashboard import (
    DashboardData,
    Percentiles,
    RewardPoint,
    Series,
    Stages,
    StageTotals,
)


def relabel(expositions: dict[str, str]) -> str:
    """Every server's samples, one family at a time, each with a ``server`` label.

    >>> print(relabel({"s0": "# TYPE up gauge\\nup 1.0\\n", "s1": "# TYPE up gauge\\nup 0.0\\n"}))
    # HELP up
    # TYPE up gauge
    up{server="s0"} 1.0
    up{server="s1"} 0.0
    <BLANKLINE>
    """
    families: dict[str, tuple[str, str, list[str]]] = {}
    for server, text in expositions.items():
        for family in text_string_to_metric_families(text):
            _, _, lines = families.setdefault(family.name, (family.type, family.documentation, []))
            for sample in family.samples:
                labels = {"server": server, **sample.labels}
                body = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
                lines.append(f"{sample.name}{{{body}}} {_number(sample.value)}")
    out = []
    for name, (kind, doc, lines) in families.items():
        out += [f"# HELP {name} {doc}".rstrip(), f"# TYPE {name} {kind}", *lines]
    return "\n".join(out) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def rebucket(stages: Stages, edges: Sequence[float], width: float) -> dict[str, list[float]]:
    """Move busy seconds onto another grid, in proportion to how the buckets overlap.

    >>> s = Stages(bucket_s=2.0, t=[0.0, 2.0], busy={"sampling": [2.0, 1.0]}, totals={})
    >>> rebucket(s, [0.0, 1.0, 2.0, 3.0], 1.0)
    {'sampling': [1.0, 1.0, 0.5, 0.5]}
    """
    out = {name: [0.0] * len(edges) for name in stages.busy}
    for name, values in stages.busy.items():
        for start, busy in zip(stages.t, values, strict=True):
            end = start + stages.bucket_s
            for i, edge in enumerate(edges):
                overlap = min(end, edge + width) - max(start, edge)
                if overlap > 0:
                    out[name][i] += busy * overlap / stages.bucket_s
    return out


def merge_stages(views: Sequence[Stages]) -> Stages:
    """The mean busy time per stage over servers, on one grid spanning all of them."""
    start = min(v.t[0] for v in views if v.t)
    end = max(v.t[-1] + v.bucket_s for v in views if v.t)
    count = max(len(v.t) for v in views)
    width = (end - start) / count
    edges = [start + i * width for i in range(count)]
    busy: dict[str, list[float]] = collections.defaultdict(lambda: [0.0] * count)
    for view in views:
        for name, values in rebucket(view, edges, width).items():
            busy[name] = [a + b / len(views) for a, b in zip(busy[name], values, strict=True)]
    totals = {
        name: StageTotals(
            busy_s=sum(v.totals[name].busy_s for v in views if name in v.totals) / len(views),
            waiting_s=sum(v.totals[name].waiting_s for v in views if name in v.totals) / len(views),
        )
        for name in {n for v in views for n in v.totals}
    }
    return Stages(bucket_s=width, t=edges, busy=dict(busy), totals=totals)


def merge_series(views: Sequence[Series]) -> Series:
    """Readings on the first server's clock; each other server's latest reading at or
    before each time is added (counts) or compared (versions: lowest; latencies: slowest)."""
    base = max(views, key=lambda s: len(s.t))
    out = Series(t=list(base.t))
    picks = [[_at_or_before(view.t, t) for t in base.t] for view in views]
    for i in range(len(base.t)):
        rows = [
            (view, pick[i]) for view, pick in zip(views, picks, strict=True) if pick[i] is not None
        ]
        out.policy_version.append(min(v.policy_version[j] for v, j in rows))  # type: ignore[index]
        for field in ("buffer_ready", "buffer_leased", "inflight", "trajectories"):
            total = sum(getattr(v, field)[j] for v, j in rows)
            getattr(out, field).append(total)
        for field in ("model_p50", "model_p90", "env_p50", "env_p90"):
            known = [getattr(v, field)[j] for v, j in rows if getattr(v, field)[j] is not None]
            getattr(out, field).append(max(known) if known else None)
        for reason in {r for v, _ in rows for r in v.dropped}:
            counts = [v.dropped[reason][j] for v, j in rows if reason in v.dropped]  # type: ignore[index]
            out.dropped.setdefault(reason, [0.0] * i).append(sum(counts))
    return out


def _at_or_before(times: Sequence[float], t: float) -> int | None:
    index = None
    for i, at in enumerate(times):
        if at <= t:
            index = i
    return index


def merge_dashboards(views: Sequence[DashboardData], policy_version: int) -> DashboardData:
    """The cluster's dashboard data (see the module docstring)."""
    totals: collections.Counter[str] = collections.Counter()
    lags: collections.Counter[int] = collections.Counter()
    rewards: dict[int, tuple[float, int]] = {}
    latency: dict[str, Percentiles] = {}
    for view in views:
        totals.update(view.totals)
        lags.update(dict(view.version_lag))
        for point in view.rewards:
            s, n = rewards.get(point.policy_version, (0.0, 0))
            rewards[point.policy_version] = (s + point.mean * point.count, n + point.count)
        for name, p in view.latency.items():
            latency[name] = _slowest(latency.get(name), p)
    trainer = [v for v in views if v.trainer_step is not None]
    return DashboardData(
        now=max(v.now for v in views),
        started_at=min(v.started_at for v in views),
        interval_s=views[0].interval_s,
        model=views[0].model,
        policy_version=policy_version,
        trainer_version=max(
            (v.trainer_version for v in views if v.trainer_version is not None), default=None
        ),
        trainer_step=max(
            (v.trainer_step for v in trainer if v.trainer_step is not None), default=None
        ),
        totals=dict(totals),
        stages=merge_stages([v.stages for v in views]),
        series=merge_series([v.series for v in views]),
        latency=latency,
        version_lag=sorted(lags.items()),
        rewards=[
            RewardPoint(policy_version=version, mean=s / n if n else 0.0, count=n)
            for version, (s, n) in sorted(rewards.items())
        ],
    )


def _slowest(a: Percentiles | None, b: Percentiles) -> Percentiles:
    if a is None:
        return b

    def top(x: float | None, y: float | None) -> float | None:
        return max(v for v in (x, y) if v is not None) if (x, y) != (None, None) else None

    return Percentiles(
        p50=top(a.p50, b.p50), p90=top(a.p90, b.p90), p99=top(a.p99, b.p99), count=a.count + b.count
    )
