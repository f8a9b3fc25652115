"""The engine's metrics without a metrics library: the names, and the sink they go to.

The engine reports to a ``MetricsSink``, the shape ``rollgym.sandboxes.metrics`` declares for
the boxes, so one adapter serves both: the server registers ``TIMINGS`` and ``COUNTS`` on
its Prometheus registry (``server.observability.metrics``). What the engine generates is
observed one level up, by the server's ``ObservedEngine``.

=================================  ==========  ==============================================
name                               labels      what
=================================  ==========  ==============================================
rollgym_weight_sync_seconds        phase       load (read + check), apply (engine paused)
rollgym_weight_updates_total       outcome     applied, rejected (the request's doing),
                                               failed (the engine's)
=================================  ==========  ==============================================
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

WEIGHT_SYNC = "rollgym_weight_sync_seconds"
WEIGHT_UPDATES = "rollgym_weight_updates_total"

# Every metric and its label names: what an adapter (the server's Prometheus sink) registers.
TIMINGS: dict[str, tuple[str, ...]] = {WEIGHT_SYNC: ("phase",)}
COUNTS: dict[str, tuple[str, ...]] = {WEIGHT_UPDATES: ("outcome",)}

Labels = Mapping[str, str]
NO_LABELS: Labels = {}


class MetricsSink(Protocol):
    """Where the engine reports. Must be cheap and never raise."""

    def observe(self, name: str, seconds: float, labels: Labels = NO_LABELS) -> None: ...

    def increment(self, name: str, labels: Labels = NO_LABELS) -> None: ...


class NullMetrics:
    """A sink that keeps nothing (an engine used outside a server)."""

    def observe(self, name: str, seconds: float, labels: Labels = NO_LABELS) -> None:
        pass

    def increment(self, name: str, labels: Labels = NO_LABELS) -> None:
        pass
