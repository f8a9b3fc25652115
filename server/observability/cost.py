"""The cost board: tokens/s, device-seconds per 1k tokens, the long tail, what savings are worth.

``CostMeter`` listens to the server (every generation, every stored group), reads the
device clock each dashboard tick, and builds a ``rollgym.contract.cost.CostBoard`` (the
definitions are in that module's docstring). ``CostCollector`` shows the latest board in
``/metrics``:

==========================================  =====  ===============================================
name                                        type   what
==========================================  =====  ===============================================
rollgym_generated_tokens_per_second         gauge  over the board's window
rollgym_prompt_tokens_per_second            gauge  over the board's window
rollgym_device_seconds_per_1k_tokens        gauge  CPU-s (GPU-s on GPU) per 1k generated tokens
rollgym_long_tail_share                     gauge  group time spent waiting on the slowest 10%
rollgym_sampling_training_ratio             gauge  sampling busy s / training busy s
rollgym_cost_per_1k_tokens                  gauge  at the price per machine-hour (if set)
rollgym_cost_per_trained_sample             gauge  at the price per machine-hour (if set)
rollgym_saving_machine_seconds{saving}      gauge  prefix_cache, speculative_decoding, precision
rollgym_spec_decode_drafting                gauge  1 while a speculative engine serves
rollgym_spec_decode_acceptance              gauge  accepted / drafted, last window with drafts
rollgym_spec_decode_shadow_acceptance       gauge  would-be acceptance, last plain window
rollgym_spec_decode_would_be_speedup        gauge  its predicted drafting rate over plain
rollgym_spec_decode_draft_step_cost         gauge  a drafting step over a plain one (learned)
rollgym_spec_decode_tokens_per_second{mode} gauge  per sequence-second: plain, drafting
rollgym_spec_decode_draft_tokens_total      count  drafted tokens (vLLM's spec-decode counters)
rollgym_spec_decode_accepted_tokens_total   count  accepted draft tokens
rollgym_spec_decode_switches_total          count  gate switches
==========================================  =====  ===============================================

Savings are estimates from this run's own measurements, in machine-seconds (busy seconds
times the engine's share of the machine):

* prefix cache: cached prompt tokens x the measured prefill seconds per uncached token;
* speculative decoding: the busy time spent drafting x (its speed / the plain speed - 1)
  (negative when drafting cost time);
* precision: busy time x (the lower precision's measured speed-up - 1), when the server
  serves in a lower precision than training and the precision gate measured both.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import time
from collections.abc import Callable, Iterable
from typing import Literal

import psutil
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rollgym.contract.cost import CostBoard, Saving, SpeculationView
from rollgym.contract.wire import Trajectory, TrajectoryGroup
from rollgym.engine.base import Generation
from rollgym.engine.vllm.speculation import EngineMeter, SpeculationController
from rollgym.server.buffer.observers import BufferObserver
from rollgym.server.config import CostConfig
from rollgym.server.dashboard.recorder import DashboardRecorder

Clock = Callable[[], float]


class DeviceClock:
    """Device-seconds used so far: CPU-seconds of this process and its children (the
    engine core), those that ended included (an engine replaced by a switch), or on a GPU
    host wall seconds x GPUs (the GPUs are held either way)."""

    def __init__(self, *, clock: Clock = time.monotonic, gpus: int | None = None):
        self._clock = clock
        self._started = clock()
        self.gpus = _gpu_count() if gpus is None else gpus
        self.kind: Literal["cpu", "gpu"] = "gpu" if self.gpus else "cpu"
        self.devices = self.gpus or os.cpu_count() or 1

    def seconds(self) -> float:
        if self.kind == "gpu":
            return (self._clock() - self._started) * self.gpus
        me = psutil.Process()
        times = me.cpu_times()  # children_*: those ended and reaped
        total = times.user + times.system + times.children_user + times.children_system
        for child in me.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                total += sum(child.cpu_times()[:2])
        return total


def _gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # no usable CUDA: a CPU host
        return 0


@dataclasses.dataclass(frozen=True)
class _Tick:
    at: float
    device_s: float
    generated: int
    prompt: int


@dataclasses.dataclass
class LongTail:
    """Per group: the wall time after all but its slowest ``max(1, 10%)`` episodes ended."""

    waiting_s: float = 0.0
    group_s: float = 0.0

    def add(self, group: TrajectoryGroup) -> None:
        spans = sorted((_started(t), t.created_at) for t in group.trajectories)
        ends = sorted(end for _, end in spans)
        if len(ends) < 2:
            return
        slowest = max(1, len(ends) // 10)
        start = min(begin for begin, _ in spans)
        self.waiting_s += ends[-1] - ends[-1 - slowest]
        self.group_s += ends[-1] - start

    @property
    def share(self) -> float | None:
        return self.waiting_s / self.group_s if self.group_s > 0 else None


def _started(trajectory: Trajectory) -> float:
    """An episode's start: its end minus every turn's model, queue and env time."""
    spent = sum(t.model_s + t.queue_s + t.env_s for t in trajectory.turns)
    return float(trajectory.created_at - spent)


class CostMeter(BufferObserver):
    """See the module docstring. ``observe`` (the engine's generations) and ``stored`` (the
    buffer's groups) are the server's taps."""

    def __init__(
        self,
        config: CostConfig,
        *,
        device: DeviceClock | None = None,
        engine_meter: EngineMeter | None = None,
        speculation: SpeculationController | None = None,
        serving_dtype: str = "float32",
        precision_speedup: float | None = None,
        precision_kl: float | None = None,
        clock: Clock = time.time,
    ):
        self.config = config
        self.device = device or DeviceClock()
        self.engine_meter = engine_meter
        self.speculation = speculation
        self.serving_dtype = serving_dtype
        self.precision_speedup = precision_speedup
        self.precision_kl = precision_kl
        self._clock = clock
        self.started_at = clock()
        self._device_at_start = self.device.seconds()
        self.generated = self.prompt = self.cached = 0
        self.generation_s = 0.0
        self.prefill_s = 0.0
        self.prefilled_tokens = 0
        self.long_tail = LongTail()
        self._ticks: collections.deque[_Tick] = collections.deque()

    # --- taps -----------------------------------------------------------------------------

    def observe(self, generation: Generation) -> None:
        self.generated += len(generation.token_ids)
        self.prompt += generation.prompt_tokens
        self.cached += generation.cached_tokens
        self.generation_s += generation.model_s
        if generation.prefill_s > 0 and generation.prompt_tokens > generation.cached_tokens:
            self.prefill_s += generation.prefill_s
            self.prefilled_tokens += generation.prompt_tokens - generation.cached_tokens

    def stored(self, group: TrajectoryGroup) -> None:
        self.long_tail.add(group)

    def tick(self, now: float | None = None) -> None:
        """Read the device clock (the dashboard's sampler calls this every interval)."""
        now = self._clock() if now is None else now
        self._ticks.append(
            _Tick(now, self.device.seconds() - self._device_at_start, self.generated, self.prompt)
        )
        while len(self._ticks) > 2 and self._ticks[1].at <= now - self.config.window_s:
            self._ticks.popleft()

    # --- the board ------------------------------------------------------------------------

    def board(
        self, *, sampling_busy_s: float, training_busy_s: float, trained_samples: int
    ) -> CostBoard:
        now = self._clock()
        price = self.config.price_per_hour
        first = self._ticks[0] if self._ticks else _Tick(now, 0.0, 0, 0)
        last = self._ticks[-1] if self._ticks else first
        window = last.at - first.at
        generated_per_s, prompt_per_s = (
            ((last.generated - first.generated) / window, (last.prompt - first.prompt) / window)
            if window > 0
            else (0.0, 0.0)
        )
        per_1k = 1000 * last.device_s / last.generated if last.generated else None
        machine_per_1k = per_1k / self.device.devices if per_1k is not None else None
        wall = now - self.started_at
        per_sample = wall / trained_samples if trained_samples else None
        share = self._engine_share(last.device_s)
        return CostBoard(
            device=self.device.kind,
            devices=self.device.devices,
            window_s=window,
            generated_tokens_per_s=generated_per_s,
            prompt_tokens_per_s=prompt_per_s,
            device_s_per_1k_tokens=per_1k,
            machine_s_per_1k_tokens=machine_per_1k,
            long_tail_share=self.long_tail.share,
            sampling_training_ratio=sampling_busy_s / training_busy_s if training_busy_s else None,
            prefix_cache_hit_rate=self.cached / self.prompt if self.prompt else None,
            trained_samples=trained_samples,
            machine_s_per_trained_sample=per_sample,
            price_per_hour=price,
            cost_per_1k_tokens=_priced(machine_per_1k, price),
            cost_per_trained_sample=_priced(per_sample, price),
            savings=[_worth(s, price) for s in self._savings(share)],
            speculation=self.speculation_view(now),
            serving_dtype=self.serving_dtype,
            precision_kl=self.precision_kl,
        )

    def _engine_share(self, device_s: float) -> float:
        """Machine-seconds per engine-busy second: device-s / busy-s / devices, at most 1."""
        busy = self.engine_meter.busy_s if self.engine_meter else self.generation_s
        if busy <= 0:
            return 1.0
        return min(1.0, device_s / busy / self.device.devices)

    def _savings(self, share: float) -> Iterable[Saving]:
        per_token = self.prefill_s / self.prefilled_tokens if self.prefilled_tokens else None
        yield Saving(
            name="prefix_cache",
            machine_s=self.cached * per_token * share if per_token is not None else None,
            note=f"{self.cached} cached prompt tokens x the measured prefill time per token",
        )
        yield self._speculation_saving(share)
        yield self._precision_saving(share)

    def _speculation_saving(self, share: float) -> Saving:
        gate = self.speculation.gate if self.speculation else None
        if gate is None or not gate.plain_speed or not gate.on_speed or not gate.on_busy_s:
            return Saving(name="speculative_decoding", machine_s=None, note="no drafting window")
        speedup = gate.on_speed / gate.plain_speed
        return Saving(
            name="speculative_decoding",
            machine_s=gate.on_busy_s * (speedup - 1) * share,
            note=f"{gate.on_busy_s:.0f} busy s drafting at {speedup:.2f}x the plain speed",
        )

    def _precision_saving(self, share: float) -> Saving:
        if self.precision_speedup is None:
            return Saving(
                name="precision",
                machine_s=None,
                note=f"serving {self.serving_dtype}; no lower precision measured and admitted",
            )
        busy = self.engine_meter.busy_s if self.engine_meter else self.generation_s
        return Saving(
            name="precision",
            machine_s=busy * (self.precision_speedup - 1) * share,
            note=f"serving {self.serving_dtype}: {self.precision_speedup:.2f}x the training "
            "precision's tokens/s, as the precision gate measured",
        )

    def speculation_view(self, now: float) -> SpeculationView:
        meter, controller = self.engine_meter, self.speculation
        if controller is None:
            return SpeculationView()
        gate = controller.gate
        drafted = meter.drafted if meter else 0
        accepted = meter.accepted if meter else 0
        return SpeculationView(
            enabled=True,
            state=gate.state,
            drafting=gate.drafting,
            acceptance=gate.acceptance,
            shadow_acceptance=gate.shadow_acceptance,
            would_be_speedup=gate.would_be_speedup,
            draft_step_cost=gate.step_cost,
            acceptance_total=accepted / drafted if drafted else None,
            plain_tokens_per_s=gate.plain_speed,
            drafting_tokens_per_s=gate.on_speed,
            drafted_tokens=drafted,
            accepted_tokens=accepted,
            switches=gate.switches,
            next_probe_in_s=max(gate.next_probe_at - now, 0.0) if gate.next_probe_at else None,
        )


def live_board(meter: CostMeter, recorder: DashboardRecorder) -> CostBoard:
    """The board now, with the dashboard's stage totals and the trainer's reports."""
    totals = recorder.stage_view(recorder.clock(), 1).totals
    return meter.board(
        sampling_busy_s=totals["sampling"].busy_s,
        training_busy_s=totals["training"].busy_s,
        trained_samples=sum(report.trajectories for report in recorder.trainer_reports),
    )


def _priced(machine_s: float | None, price: float | None) -> float | None:
    return None if machine_s is None or price is None else machine_s * price / 3600


def _worth(saving: Saving, price: float | None) -> Saving:
    return saving.model_copy(update={"worth": _priced(saving.machine_s, price)})


class CostCollector(Collector):
    """The latest board as Prometheus metrics (see the module docstring)."""

    def __init__(self, latest: Callable[[], CostBoard | None]):
        self._latest = latest

    def collect(self) -> Iterable[Metric]:
        board = self._latest()
        if board is None:
            return
        gauges = {
            "rollgym_generated_tokens_per_second": board.generated_tokens_per_s,
            "rollgym_prompt_tokens_per_second": board.prompt_tokens_per_s,
            "rollgym_device_seconds_per_1k_tokens": board.device_s_per_1k_tokens,
            "rollgym_long_tail_share": board.long_tail_share,
            "rollgym_sampling_training_ratio": board.sampling_training_ratio,
            "rollgym_cost_per_1k_tokens": board.cost_per_1k_tokens,
            "rollgym_cost_per_trained_sample": board.cost_per_trained_sample,
            "rollgym_spec_decode_drafting": float(board.speculation.drafting),
            "rollgym_spec_decode_acceptance": board.speculation.acceptance,
            "rollgym_spec_decode_shadow_acceptance": board.speculation.shadow_acceptance,
            "rollgym_spec_decode_would_be_speedup": board.speculation.would_be_speedup,
            "rollgym_spec_decode_draft_step_cost": board.speculation.draft_step_cost,
        }
        for name, value in gauges.items():
            if value is not None:
                yield GaugeMetricFamily(name, name.removeprefix("rollgym_"), value=value)
        savings = GaugeMetricFamily(
            "rollgym_saving_machine_seconds", "machine-seconds saved", labels=["saving"]
        )
        for saving in board.savings:
            if saving.machine_s is not None:
                savings.add_metric([saving.name], saving.machine_s)
        yield savings
        spec = board.speculation
        rates = GaugeMetricFamily(
            "rollgym_spec_decode_tokens_per_second", "per busy second", labels=["mode"]
        )
        for mode, rate in (
            ("plain", spec.plain_tokens_per_s),
            ("drafting", spec.drafting_tokens_per_s),
        ):
            if rate is not None:
                rates.add_metric([mode], rate)
        yield rates
        for name, value in (
            ("rollgym_spec_decode_draft_tokens", spec.drafted_tokens),
            ("rollgym_spec_decode_accepted_tokens", spec.accepted_tokens),
            ("rollgym_spec_decode_switches", spec.switches),
        ):
            yield CounterMetricFamily(name, name.removeprefix("rollgym_"), value=value)
