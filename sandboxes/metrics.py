"""Sandbox metrics without a metrics library: the names and an in-memory recorder.

``sandboxes`` reports every timing and event to a ``MetricsSink``
(``rollgym.contract.metrics``, the engine's sink too); the server adapts it to Prometheus
(or reads ``MetricsRecorder.snapshot()``). Names, all in seconds or counts:

=================================  ==========  ====================================================
name                               labels      what
=================================  ==========  ====================================================
sandbox_pool_wait_seconds                      time an acquire waited for a free box
sandbox_round_trip_seconds         op          host -> executor -> host, per call
sandbox_command_seconds            op          the command's own time inside the box
sandbox_cold_start_seconds                     create + start + first answer of a new box
sandbox_reset_seconds                          a reset between episodes (host round trip)
sandbox_timeouts_total             op          commands killed at their timeout
sandbox_oom_kills_total            op          commands killed for memory (the box lives on)
sandbox_truncated_total            op          calls whose output was cut at the cap
sandbox_deaths_total               reason      boxes lost: unresponsive (crashed, killed, past
                                               the host deadline), bad_reply, reset_failed,
                                               start_failed
sandbox_replacements_total                     boxes started to replace a lost or recycled one
sandbox_recycled_total             reason      boxes retired on purpose: timeout, oom
sandbox_image_acquire_seconds      image,path  an acquire of a box of one image (``ImagePool``):
                                               path warm (an idle box was there) or cold (a
                                               box had to start, or wait for a free one)
sandbox_image_warm_hits_total      image       acquires served by an idle box of the image
sandbox_image_cold_starts_total    image       boxes started because none of the image was idle
sandbox_image_evictions_total      image,      idle boxes stopped: lru (room for another image
                                   reason      under the caps), demand (more than the image's
                                               recent demand)
=================================  ==========  ====================================================

``op`` is one of shell, python, write, read, verify, grade.
"""

from __future__ import annotations

import collections
import dataclasses
import statistics
import threading

from rollgym.contract.metrics import NO_LABELS as NO_LABELS
from rollgym.contract.metrics import Labels as Labels
from rollgym.contract.metrics import MetricsSink as MetricsSink
from rollgym.contract.metrics import NullMetrics as NullMetrics

POOL_WAIT = "sandbox_pool_wait_seconds"
ROUND_TRIP = "sandbox_round_trip_seconds"
COMMAND = "sandbox_command_seconds"
COLD_START = "sandbox_cold_start_seconds"
RESET = "sandbox_reset_seconds"
TIMEOUTS = "sandbox_timeouts_total"
OOM_KILLS = "sandbox_oom_kills_total"
TRUNCATED = "sandbox_truncated_total"
DEATHS = "sandbox_deaths_total"
REPLACEMENTS = "sandbox_replacements_total"
RECYCLED = "sandbox_recycled_total"
IMAGE_ACQUIRE = "sandbox_image_acquire_seconds"
WARM_HITS = "sandbox_image_warm_hits_total"
COLD_STARTS = "sandbox_image_cold_starts_total"
EVICTIONS = "sandbox_image_evictions_total"

# Every metric and its label names: what an adapter (the server's Prometheus sink) registers.
TIMINGS: dict[str, tuple[str, ...]] = {
    POOL_WAIT: (),
    ROUND_TRIP: ("op",),
    COMMAND: ("op",),
    COLD_START: (),
    RESET: (),
    IMAGE_ACQUIRE: ("image", "path"),
}
COUNTS: dict[str, tuple[str, ...]] = {
    TIMEOUTS: ("op",),
    OOM_KILLS: ("op",),
    TRUNCATED: ("op",),
    DEATHS: ("reason",),
    REPLACEMENTS: (),
    RECYCLED: ("reason",),
    WARM_HITS: ("image",),
    COLD_STARTS: ("image",),
    EVICTIONS: ("image", "reason"),
}


@dataclasses.dataclass(frozen=True)
class TimingSummary:
    count: int
    total_s: float
    p50_s: float
    p90_s: float
    p99_s: float


def _key(name: str, labels: Labels) -> str:
    if not labels:
        return name
    return name + "{" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())) + "}"


def summarize(
    samples: list[float], total_s: float | None = None, count: int | None = None
) -> TimingSummary:
    if not samples:
        return TimingSummary(0, 0.0, 0.0, 0.0, 0.0)
    if len(samples) == 1:
        cuts = [samples[0]] * 99
    else:
        cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return TimingSummary(
        count=len(samples) if count is None else count,
        total_s=sum(samples) if total_s is None else total_s,
        p50_s=cuts[49],
        p90_s=cuts[89],
        p99_s=cuts[98],
    )


class MetricsRecorder:
    """Keeps counts, sums and the last ``window`` samples of each timing, per label set.

    ``snapshot()`` gives ``{"name{label=value}": TimingSummary | int}``.
    """

    def __init__(self, window: int = 10_000) -> None:
        self._lock = threading.Lock()
        self._samples: dict[str, collections.deque[float]] = {}
        self._totals: dict[str, tuple[int, float]] = {}
        self._counters: collections.Counter[str] = collections.Counter()
        self._window = window

    def observe(self, name: str, seconds: float, labels: Labels = NO_LABELS) -> None:
        key = _key(name, labels)
        with self._lock:
            samples = self._samples.get(key)
            if samples is None:
                samples = self._samples[key] = collections.deque(maxlen=self._window)
            samples.append(seconds)
            count, total = self._totals.get(key, (0, 0.0))
            self._totals[key] = (count + 1, total + seconds)

    def increment(self, name: str, labels: Labels = NO_LABELS) -> None:
        with self._lock:
            self._counters[_key(name, labels)] += 1

    def snapshot(self) -> dict[str, TimingSummary | int]:
        with self._lock:
            samples = {key: list(values) for key, values in self._samples.items()}
            totals = dict(self._totals)
            counters = dict(self._counters)
        out: dict[str, TimingSummary | int] = dict(counters)
        for key, values in samples.items():
            count, total = totals[key]
            out[key] = summarize(values, total, count)
        return out
