"""The server's Prometheus metrics, on a registry of its own (one per app, no globals).

==========================================  =========  =========================================
name                                        type       what
==========================================  =========  =========================================
rollgym_generation_seconds                  histogram  engine time of one generation (queue out)
rollgym_generation_queue_seconds            histogram  wait before the engine took a request
rollgym_env_step_seconds                    histogram  one env step, sandbox included
rollgym_sandbox_seconds                     histogram  the sandbox part of one env step
rollgym_buffer_wait_seconds                 histogram  a group's time in the buffer until pulled
rollgym_weight_sync_seconds{phase}          (see engine.metrics) load, apply
rollgym_inflight_episodes                   gauge      episodes being rolled out
rollgym_buffer_groups{state}                gauge*     groups ready / leased in the buffer
rollgym_policy_version                      gauge*     the served policy's version
rollgym_version_lag                         gauge*     policy version - the trainer's last pull
rollgym_dropped_trajectories_total{reason}  counter    stale, zero_variance, too_few_valid
rollgym_invalid_trajectories_total          counter    infrastructure failures (never trained)
rollgym_truncated_by_context_total{source}  counter    episodes cut by a full context
rollgym_trajectories_total{source}          counter    trajectories persisted
rollgym_prompt_tokens_total                 counter    prompt tokens sent to the engine
rollgym_cached_prompt_tokens_total          counter    ... of which served by the prefix cache
rollgym_prefix_cache_hit_rate               gauge      cached / prompt tokens since start
rollgym_generated_tokens_total              counter    sampled tokens
rollgym_weight_updates_total{outcome}       (see engine.metrics) applied, rejected, failed
rollgym_served_weights_mismatch             gauge      the last update's canary: max |logprob
                                                       served - trainer's| on its probes
rollgym_sessions_active                     gauge      open external-agent sessions
rollgym_session_groups_total{outcome}       counter    settled session groups: kept, set_aside
rollgym_agent_quota_refusals_total{agent,quota}  counter  agent calls refused over a quota
rollgym_event_loop_lag_seconds              histogram  how late the loop wakes a 10 ms sleep
rollgym_event_loop_lag_max_seconds          gauge      ... the longest in the last 10 s
rollgym_event_loop_busy_max_seconds         gauge      most loop-thread CPU in one such sleep
sandbox_pool_boxes{state}                   gauge*     the pool's boxes: ready, leased, ...
sandbox_image_boxes{image,state}            gauge*     a pool of many images: each one's boxes
                                                       and its warm target
sandbox_*                                   (see sandboxes.metrics) the sandbox pool's own
==========================================  =========  =========================================

Who keeps them: the engine's generations come through ``ObservedEngine``
(``record_generation``), the buffer's pulls as its observer (``pulled``), the sandboxes and
the engine through their sinks. The gauges marked * are read from the services themselves
when the registry is collected (``LiveGauges``), so no route keeps anything up to date.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rollgym.contract.wire import PullRequest, PullResponse
from rollgym.engine import metrics as engine
from rollgym.engine.base import Generation
from rollgym.sandboxes import metrics as sbx
from rollgym.sandboxes.base import SandboxPool
from rollgym.server.buffer.observers import BufferObserver
from rollgym.server.buffer.store import TrajectoryBuffer

# Sub-millisecond buckets too: an in-process env step takes tens of microseconds.
_FAST = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
    0.5, 1, 2.5, 5, 10, 30, 60,
)  # fmt: skip
_SLOW = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800)
_LAG = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class PrometheusSink:
    """The metrics sink (``contract.metrics.MetricsSink``, the boxes' and the engine's)
    onto Prometheus: every metric a package declares in its ``timings`` and
    ``counts`` is registered; anything else is ignored."""

    def __init__(
        self,
        registry: CollectorRegistry,
        timings: dict[str, tuple[str, ...]],
        counts: dict[str, tuple[str, ...]],
    ):
        self._histograms = {
            name: Histogram(name, name, labels, registry=registry, buckets=_FAST)
            for name, labels in timings.items()
        }
        self._counters = {
            name: Counter(name, name, labels, registry=registry) for name, labels in counts.items()
        }

    def observe(self, name: str, seconds: float, labels: sbx.Labels = sbx.NO_LABELS) -> None:
        histogram = self._histograms.get(name)
        if histogram is not None:
            with contextlib.suppress(ValueError):  # an unknown label set: never raise
                (histogram.labels(**labels) if labels else histogram).observe(seconds)

    def increment(self, name: str, labels: sbx.Labels = sbx.NO_LABELS) -> None:
        counter = self._counters.get(name)
        if counter is not None:
            with contextlib.suppress(ValueError):
                (counter.labels(**labels) if labels else counter).inc()


class ServerMetrics(BufferObserver):
    """Every metric of the table above, registered on ``self.registry``."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.generation = Histogram(
            "rollgym_generation_seconds", "engine time per generation", registry=r, buckets=_FAST
        )
        self.generation_queue = Histogram(
            "rollgym_generation_queue_seconds", "engine queue wait", registry=r, buckets=_FAST
        )
        self.env_step = Histogram(
            "rollgym_env_step_seconds", "env step time", registry=r, buckets=_FAST
        )
        self.sandbox = Histogram(
            "rollgym_sandbox_seconds", "sandbox time per step", registry=r, buckets=_FAST
        )
        self.buffer_wait = Histogram(
            "rollgym_buffer_wait_seconds", "put to pull", registry=r, buckets=_SLOW
        )
        self.inflight = Gauge("rollgym_inflight_episodes", "episodes running", registry=r)
        self.dropped = Counter(
            "rollgym_dropped_trajectories", "dropped samples", ["reason"], registry=r
        )
        self.invalid = Counter("rollgym_invalid_trajectories", "infra failures", registry=r)
        self.truncated_by_context = Counter(
            "rollgym_truncated_by_context", "episodes cut by a full context", ["source"], registry=r
        )
        self.trajectories = Counter(
            "rollgym_trajectories", "persisted trajectories", ["source"], registry=r
        )
        self.prompt_tokens = Counter("rollgym_prompt_tokens", "prompt tokens", registry=r)
        self.cached_tokens = Counter("rollgym_cached_prompt_tokens", "cached tokens", registry=r)
        self.prefix_hit_rate = Gauge(
            "rollgym_prefix_cache_hit_rate", "cached / prompt tokens", registry=r
        )
        self.generated_tokens = Counter("rollgym_generated_tokens", "sampled tokens", registry=r)
        self.sessions = Gauge("rollgym_sessions_active", "open sessions", registry=r)
        self.served_weights_mismatch = Gauge(
            "rollgym_served_weights_mismatch",
            "last update's canary: max |logprob served - trainer's| on its probes",
            registry=r,
        )
        self.session_groups = Counter(
            "rollgym_session_groups", "settled session groups", ["outcome"], registry=r
        )
        self.quota_refusals = Counter(
            "rollgym_agent_quota_refusals", "over-quota calls", ["agent", "quota"], registry=r
        )
        self.loop_lag = Histogram(
            "rollgym_event_loop_lag_seconds", "event loop lag", registry=r, buckets=_LAG
        )
        self.loop_lag_max = Gauge(
            "rollgym_event_loop_lag_max_seconds", "longest lag, last 10 s", registry=r
        )
        self.loop_busy_max = Gauge(
            "rollgym_event_loop_busy_max_seconds", "most loop CPU per sleep, last 10 s", registry=r
        )
        self.sandbox_sink = PrometheusSink(r, sbx.TIMINGS, sbx.COUNTS)
        self.engine_sink = PrometheusSink(r, engine.TIMINGS, engine.COUNTS)
        self._prompt_total = 0
        self._cached_total = 0

    def record_generation(self, generation: Generation) -> None:
        self.generation.observe(generation.model_s)
        self.generation_queue.observe(generation.queue_s)
        self.prompt_tokens.inc(generation.prompt_tokens)
        self.cached_tokens.inc(generation.cached_tokens)
        self.generated_tokens.inc(len(generation.token_ids))
        self._prompt_total += generation.prompt_tokens
        self._cached_total += generation.cached_tokens
        if self._prompt_total:
            self.prefix_hit_rate.set(self._cached_total / self._prompt_total)

    def pulled(
        self, request: PullRequest, response: PullResponse, waited_s: Sequence[float]
    ) -> None:
        for waited in waited_s:
            self.buffer_wait.observe(waited)
        if response.dropped_stale:
            self.dropped.labels(reason="stale").inc(response.dropped_stale)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class LiveGauges(Collector):
    """The gauges read from the services each time the registry is collected (``/metrics``,
    the dashboard's sampler): the served version, the trainer's lag behind it (from the
    buffer's last pull), the buffer's depth, the sandbox pool's boxes."""

    def __init__(
        self,
        policy_version: Callable[[], int],
        buffer: TrajectoryBuffer,
        pool: SandboxPool | None = None,
    ):
        self._policy_version = policy_version
        self._buffer = buffer
        self._pool = pool

    def collect(self) -> Iterator[Metric]:
        version = self._policy_version()
        trainer = self._buffer.trainer_version
        yield GaugeMetricFamily("rollgym_policy_version", "served version", value=version)
        lag = 0 if trainer is None else version - trainer
        yield GaugeMetricFamily("rollgym_version_lag", "policy - trainer version", value=lag)
        groups = GaugeMetricFamily("rollgym_buffer_groups", "buffered", labels=["state"])
        groups.add_metric(["ready"], self._buffer.depth.ready)
        groups.add_metric(["leased"], self._buffer.depth.leased)
        yield groups
        boxes = GaugeMetricFamily("sandbox_pool_boxes", "boxes by state", labels=["state"])
        status = getattr(self._pool, "status", None)  # a warm pool's: ready, leased, ...
        if status is not None:
            current = status()
            for state in ("ready", "leased", "starting", "waiting"):
                boxes.add_metric([state], getattr(current, state, 0))
        yield boxes
        kinds = getattr(self._pool, "kinds", None)  # a pool of many images: each one's boxes
        if kinds is not None:
            per_image = GaugeMetricFamily(
                "sandbox_image_boxes", "boxes of each image by state", labels=["image", "state"]
            )
            for kind in kinds():
                for state in ("ready", "leased", "starting", "waiting", "target"):
                    per_image.add_metric([kind.image, state], getattr(kind, state))
            yield per_image
