"""Percentiles from the server's own Prometheus histograms (``histogram_quantile``'s rule).

A histogram keeps cumulative counts per upper bound ``le``. The q-quantile lies in the
first bucket whose count reaches ``q x total``; inside it, observations are taken as spread
evenly between the bucket's bounds (lower bound 0 for the first bucket). Past the last
finite bound there is nothing to interpolate, so the last finite bound is the answer.
A recent window is the difference of two readings taken at its ends::

    now = read_buckets(registry, "rollgym_generation_seconds")
    recent = difference(now, reading_a_minute_ago)
    quantile(recent, 0.9)   # p90 of the last minute's generations (None: none happened)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Protocol

from prometheus_client import Metric

Buckets = tuple[tuple[float, float], ...]  # (upper bound, cumulative count), ascending


class Collects(Protocol):
    """A Prometheus registry, or anything that collects metrics like one."""

    def collect(self) -> Iterable[Metric]: ...


def read_buckets(registry: Collects, name: str, labels: dict[str, str] | None = None) -> Buckets:
    """The cumulative buckets of histogram ``name`` (without ``_bucket``); empty if unknown."""
    wanted = labels or {}
    out: list[tuple[float, float]] = []
    for family in registry.collect():
        if family.name != name:
            continue
        for sample in family.samples:
            if sample.name != f"{name}_bucket":
                continue
            extra = {k: v for k, v in sample.labels.items() if k != "le"}
            if extra == wanted:
                out.append((float(sample.labels["le"]), sample.value))
    return tuple(sorted(out))


def difference(later: Buckets, earlier: Buckets) -> Buckets:
    """The observations between two readings of one histogram (same bounds)."""
    before = dict(earlier)
    return tuple((bound, count - before.get(bound, 0.0)) for bound, count in later)


def total(buckets: Buckets) -> float:
    return buckets[-1][1] if buckets else 0.0


def quantile(buckets: Buckets, q: float) -> float | None:
    """The ``q``-quantile (0 <= q <= 1) of the observations; None when there are none."""
    count = total(buckets)
    if count <= 0:
        return None
    rank = q * count
    lower_bound, lower_count = 0.0, 0.0
    last_finite = 0.0
    for bound, cumulative in buckets:
        if math.isinf(bound):
            return last_finite
        if cumulative >= rank and cumulative > lower_count:
            share = (rank - lower_count) / (cumulative - lower_count)
            return lower_bound + (bound - lower_bound) * share
        lower_bound, lower_count, last_finite = bound, cumulative, bound
    return last_finite
