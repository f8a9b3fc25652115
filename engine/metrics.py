"""The engine's metrics without a metrics library: the names, and the sink they go to.

The engine reports to a ``MetricsSink`` (``rollgym.contract.metrics``, the boxes' sink too),
so one adapter serves both: the server registers ``TIMINGS`` and ``COUNTS`` on its
Prometheus registry (``server.observability.metrics``). What the engine generates is
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

from rollgym.contract.metrics import NO_LABELS as NO_LABELS
from rollgym.contract.metrics import Labels as Labels
from rollgym.contract.metrics import MetricsSink as MetricsSink
from rollgym.contract.metrics import NullMetrics as NullMetrics

WEIGHT_SYNC = "rollgym_weight_sync_seconds"
WEIGHT_UPDATES = "rollgym_weight_updates_total"

# Every metric and its label names: what an adapter (the server's Prometheus sink) registers.
TIMINGS: dict[str, tuple[str, ...]] = {WEIGHT_SYNC: ("phase",)}
COUNTS: dict[str, tuple[str, ...]] = {WEIGHT_UPDATES: ("outcome",)}
