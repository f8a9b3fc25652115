"""A watch on the event loop: how late it wakes, and how busy it was.

``watch_loop`` is a task that sleeps ``interval_s`` over and over and records how late it
wakes (``rollgym_event_loop_lag_seconds``): the longest time anything held the loop. On a
shared machine the process is also descheduled at random, which shows as lag too; the loop
thread's own CPU time over each sleep (``rollgym_event_loop_busy_max_seconds``) tells the
server's own work apart.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable

from rollgym.server.observability.metrics import ServerMetrics


async def watch_loop(
    metrics: ServerMetrics, *, interval_s: float = 0.01, window_s: float = 10.0
) -> None:
    """Record the event loop's lag until cancelled (see the module docstring); the gauge
    holds the longest lag of the last ``window_s``."""
    lags, busy = _WindowMax(window_s), _WindowMax(window_s)
    clock: Callable[[], float] = time.monotonic
    while True:
        before, cpu_before = clock(), time.thread_time()
        await asyncio.sleep(interval_s)
        now = clock()
        lag = max(now - before - interval_s, 0.0)
        metrics.loop_lag.observe(lag)
        metrics.loop_lag_max.set(lags.add(now, lag))
        metrics.loop_busy_max.set(busy.add(now, time.thread_time() - cpu_before))


class _WindowMax:
    """The largest value added in the last ``window_s`` (a monotonic queue)."""

    def __init__(self, window_s: float):
        self.window_s = window_s
        self._recent: collections.deque[tuple[float, float]] = collections.deque()

    def add(self, at: float, value: float) -> float:
        recent = self._recent
        while recent and recent[0][0] < at - self.window_s:
            recent.popleft()
        while recent and recent[-1][1] <= value:
            recent.pop()  # a smaller value never becomes the window's maximum again
        recent.append((at, value))
        return recent[0][1]
