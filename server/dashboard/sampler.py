"""Read the server every ``interval_s`` into the recorder, while the app runs.

A reading is cheap (a few gauges and the Prometheus registry, in memory), so it runs on
the event loop. ``read_server`` turns the running services into a ``Reading``; ``sample``
is the loop the app's lifespan starts as a task and cancels at shutdown.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from rollgym.server.buffer import BufferDepth
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


def _value(registry: CollectorRegistry, name: str, labels: dict[str, str] | None = None) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def read_server(
    registry: CollectorRegistry, policy_version: int, depth: BufferDepth, *, at: float
) -> Reading:
    """The server's state now, from its metrics registry and the buffer's depth."""
    dropped = {
        reason: _value(registry, "rollgym_dropped_trajectories_total", {"reason": reason})
        for reason in DROP_REASONS
    }
    dropped["invalid"] = _value(registry, "rollgym_invalid_trajectories_total")
    trajectories = sum(
        _value(registry, "rollgym_trajectories_total", {"source": source})
        for source in ("rollout", "session")
    )
    return Reading(
        at=at,
        policy_version=policy_version,
        buffer_ready=depth.ready,
        buffer_leased=depth.leased,
        inflight=int(_value(registry, "rollgym_inflight_episodes")),
        trajectories=trajectories,
        dropped=dropped,
        truncated_by_context=sum(
            _value(registry, "rollgym_truncated_by_context_total", {"source": source})
            for source in ("rollout", "session")
        ),
        histograms={key: read_buckets(registry, name) for key, name in HISTOGRAMS.items()},
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
