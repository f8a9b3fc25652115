"""The metrics sink: where the boxes and the engine report, declared once.

Components report timings and counts without a metrics library: each declares its metric
names (``sandboxes.metrics``, ``engine.metrics``) and reports to a ``MetricsSink``; the
server adapts the one sink to Prometheus (``server.observability.metrics``), and a
component used outside a server gets ``NullMetrics``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

Labels = Mapping[str, str]
NO_LABELS: Labels = {}


class MetricsSink(Protocol):
    """Where a component reports. Called from any thread; must be cheap and never raise."""

    def observe(self, name: str, seconds: float, labels: Labels = NO_LABELS) -> None: ...

    def increment(self, name: str, labels: Labels = NO_LABELS) -> None: ...


class NullMetrics:
    """A sink that keeps nothing (a component used outside a server)."""

    def observe(self, name: str, seconds: float, labels: Labels = NO_LABELS) -> None:
        pass

    def increment(self, name: str, labels: Labels = NO_LABELS) -> None:
        pass
