"""The guards every request passes: the lag watch sees a stall; error bodies always encode."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

from rollgym.server.http.guards import error_bytes
from rollgym.server.observability.event_loop import watch_loop
from rollgym.server.observability.metrics import ServerMetrics


async def test_the_lag_watch_sees_a_blocked_loop() -> None:
    metrics = ServerMetrics()
    watch = asyncio.create_task(watch_loop(metrics, interval_s=0.005))
    await asyncio.sleep(0.05)
    time.sleep(0.2)  # noqa: ASYNC251  # a request doing CPU work on the loop: the stall to see
    await asyncio.sleep(0.05)
    watch.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watch
    stalled = metrics.registry.get_sample_value("rollgym_event_loop_lag_max_seconds")
    assert stalled is not None and stalled >= 0.15
    slow = metrics.registry.get_sample_value("rollgym_event_loop_lag_seconds_bucket", {"le": "0.1"})
    total = metrics.registry.get_sample_value("rollgym_event_loop_lag_seconds_count")
    assert slow is not None and total is not None and total - slow >= 1


def test_an_error_body_encodes_whatever_text_it_quotes() -> None:
    body = json.loads(error_bytes("invalid_request", "env_kwargs.\ud800: bad " + "x" * 5000))
    assert body["error"] == "invalid_request"
    assert body["message"].startswith("env_kwargs.\\ud800: bad") and len(body["message"]) < 2100
