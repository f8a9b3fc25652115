"""Read the server every ``interval_s`` into the recorder, while the app runs.

A reading is cheap (a few gauges and the Prometheus registry, in memory), so it runs on
the event loop. It collects the registry once: every collection runs every collector (the
cost board's included), and reading each value by its own collection (``get_sample_value``)
made one reading block the loop for tens of milliseconds on a busy machine. ``read_server`` turns the running services into a ``Reading``; ``sample``
is the loop the app's lifespan starts as a task and cancels at shutdown.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Metric

from rollgym.server.buffer.store import BufferDepth
from rollgym.server.dashboard.quantiles import read_buckets
from rollgym.server.dashboard.recorder import ENVIRONMENT, MODEL, DashboardRecorder, Reading

logger = logging.getLogger(__name__)

HISTOGRAMS = {
    MODEL: "rollgym_generation_seconds",
    ENVIRONMENT: "rollgym_env_step_seconds",
    "sandbox": "rollgym_sandbox_seconds",
    "queue": "rollgym_generation_queue_seconds",
}
DROP_REASONS = ("stale", "zero_variance", "too_few_valid")


class _Collected:
    """A registry's metrics, collected once, read like the registry."""

    def __init__(self, registry: CollectorRegistry):
        self._families = list(registry.collect())

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)

    def value(self, name: str, labels: dict[str, str] | None = None) -> float:
        wanted = labels or {}
        for family in self._families:
            for sample in family.samples:
                if sample.name == name and sample.labels == wanted:
                    return float(sample.value)
        return 0.0


def read_server(
    registry: CollectorRegistry, policy_version: int, depth: BufferDepth, *, at: float
) -> Reading:
    """The server's state now, from its metrics registry and the buffer's depth."""
    metrics = _Collected(registry)
    dropped = {
        reason: metrics.value("rollgym_dropped_trajectories_total", {"reason": reason})
        for reason in DROP_REASONS
    }
    dropped["invalid"] = metrics.value("rollgym_invalid_trajectories_total")
    trajectories = sum(
        metrics.value("rollgym_trajectories_total", {"source": source})
        for source in ("rollout", "session")
    )
    return Reading(
        at=at,
        policy_version=policy_version,
        buffer_ready=depth.ready,
        buffer_leased=depth.leased,
        inflight=int(metrics.value("rollgym_inflight_episodes")),
        trajectories=trajectories,
        dropped=dropped,
        truncated_by_context=sum(
            metrics.value("rollgym_truncated_by_context_total", {"source": source})
            for source in ("rollout", "session")
        ),
        histograms={key: read_buckets(metrics, name) for key, name in HISTOGRAMS.items()},
    )


async def sample(
    recorder: DashboardRecorder,
    read: Callable[[float], Reading],
    *,
    clock: Callable[[], float] = time.time,
) -> None:
    """Feed ``recorder`` a reading now and every ``interval_s``, until cancelled."""
    while True:
        try:
            recorder.reading(read(clock()))
        except Exception:  # a dashboard must never take the server down
            logger.exception("dashboard reading failed")
        await asyncio.sleep(recorder.config.interval_s)
