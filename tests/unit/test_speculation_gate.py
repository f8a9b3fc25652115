"""The speculation gate's rules, its controller on a simulated engine, and the meter."""

from __future__ import annotations

import pytest
import torch

from rollgym.server.engine.speculation import (
    EngineMeter,
    SpeculationController,
    SpeculationGate,
    Window,
    WindowRule,
)
from rollgym.server.engine.worker_ext import _expand_batch_to_tokens


def gate(**overrides: float) -> SpeculationGate:
    options = {"min_acceptance": 0.3, "tolerance": 0.05, "probe_after_s": 10.0} | overrides
    return SpeculationGate(**options)  # type: ignore[arg-type]


PLAIN = Window(tokens=1000, busy_s=1.0)  # 1000 tokens per busy second


def test_it_measures_the_plain_rate_first_then_drafts() -> None:
    g = gate()
    assert not g.drafting and g.state == "baseline"
    assert g.close_window(PLAIN, now=0.0)
    assert g.plain_speed == 1000.0 and g.switches == 1


def test_low_acceptance_switches_off_even_when_fast() -> None:
    g = gate()
    g.close_window(PLAIN, now=0.0)
    assert not g.close_window(Window(2000, 1.0, drafted=100, accepted=20), now=1.0)
    assert g.state == "off" and g.acceptance == 0.2 and g.next_probe_at == 11.0


def test_a_rate_below_plain_beyond_the_tolerance_switches_off() -> None:
    g = gate()
    g.close_window(PLAIN, now=0.0)
    assert g.close_window(Window(960, 1.0, drafted=100, accepted=90), now=1.0)  # -4%: on
    assert not g.close_window(Window(940, 1.0, drafted=100, accepted=90), now=2.0)  # -6%: off


def test_no_drafts_is_judged_by_rate_alone() -> None:
    g = gate()
    g.close_window(PLAIN, now=0.0)
    assert g.close_window(Window(1000, 1.0), now=1.0)
    assert g.acceptance is None


def test_probes_back_off_while_they_fail_and_reset_when_one_pays() -> None:
    g = gate(probe_after_s=10.0)
    g.close_window(PLAIN, now=0.0)
    bad = Window(500, 1.0, drafted=100, accepted=0)
    good = Window(1500, 1.0, drafted=100, accepted=80)
    g.close_window(bad, now=1.0)
    assert not g.tick(10.0) and g.tick(11.0)  # probes at 1 + 10
    g.close_window(bad, now=12.0)
    assert g.next_probe_at == 32.0  # the wait doubled
    assert not g.tick(31.0)
    g.close_window(PLAIN, now=31.5)  # off: windows refresh the plain rate
    assert g.tick(32.0)
    assert g.close_window(good, now=33.0)  # pays: stays on, the wait resets
    g.close_window(bad, now=34.0)
    assert g.next_probe_at == 44.0


def test_the_wait_is_capped() -> None:
    g = gate(probe_after_s=10.0, max_probe_after_s=25.0)
    g.close_window(PLAIN, now=0.0)
    bad = Window(500, 1.0, drafted=100, accepted=0)
    now = 1.0
    for _ in range(4):
        g.close_window(bad, now=now)
        now = g.next_probe_at or now
        g.tick(now)
    assert g.next_probe_at is None and g._wait_s == 25.0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_meter_counts_busy_time_only_while_requests_run() -> None:
    clock = Clock()
    meter = EngineMeter(clock=clock)
    meter.step(generated=0, prompt=10, running=2)
    clock.now = 1.0
    meter.step(generated=5, prompt=0, running=1, drafts=1, drafted=3, accepted=2)
    clock.now = 2.0
    meter.step(generated=5, prompt=0, running=0)  # the last request finished here
    clock.now = 10.0
    meter.step(generated=0, prompt=0, running=0)  # idle: not busy
    assert meter.totals() == Window(10, busy_s=2.0, drafted=3, accepted=2, sequence_s=3.0)
    assert meter.totals().speed == pytest.approx(10 / 3)  # tokens per sequence-second
    meter.mark()
    assert meter.since_mark() == Window(0, 0.0, sequence_s=0.0)


def test_speed_is_per_running_request() -> None:
    # the same per-request speed at 8 requests and at 2: a batch's tail is not "slower"
    assert Window(800, 1.0, sequence_s=8.0).speed == Window(200, 1.0, sequence_s=2.0).speed


class SimulatedEngine:
    """An engine whose rate depends on drafting: ``on_rate`` with drafts, 1000 without."""

    def __init__(self, meter: EngineMeter, clock: Clock, *, on_rate: float, acceptance: float):
        self.meter, self.clock = meter, clock
        self.on_rate, self.acceptance = on_rate, acceptance
        self.drafting = True  # vLLM's drafter drafts until told otherwise
        self.switches: list[bool] = []

    async def set_drafting(self, on: bool) -> None:
        self.drafting = on
        self.switches.append(on)

    def run(self, seconds: float) -> None:
        """Busy steps of 0.1 s."""
        for _ in range(round(seconds * 10)):
            self.clock.now += 0.1
            rate = self.on_rate if self.drafting else 1000.0
            drafted = 30 if self.drafting else 0
            self.meter.step(
                generated=round(rate * 0.1),
                prompt=0,
                running=1,
                drafted=drafted,
                accepted=round(drafted * self.acceptance),
            )


async def drive(engine: SimulatedEngine, controller: SpeculationController, seconds: float):
    for _ in range(round(seconds)):
        engine.run(1.0)
        await controller.step()


@pytest.mark.parametrize(
    ("on_rate", "acceptance", "drafting_at_the_end"),
    [(1500.0, 0.8, True), (800.0, 0.8, False), (1200.0, 0.1, False)],
)
async def test_the_controller_keeps_the_better_mode(on_rate, acceptance, drafting_at_the_end):
    clock = Clock()
    meter = EngineMeter(clock=clock)
    engine = SimulatedEngine(meter, clock, on_rate=on_rate, acceptance=acceptance)
    controller = SpeculationController(
        gate(probe_after_s=100.0),
        meter,
        WindowRule(tokens=10**9, busy_s=2.0),
        engine.set_drafting,
        clock=clock,
    )
    await drive(engine, controller, 30)
    assert engine.switches[0] is False  # the baseline window runs without drafts
    assert engine.drafting is drafting_at_the_end
    assert controller.gate.plain_speed == pytest.approx(1000.0)


async def test_the_controller_probes_again_later() -> None:
    clock = Clock()
    meter = EngineMeter(clock=clock)
    engine = SimulatedEngine(meter, clock, on_rate=800.0, acceptance=0.8)
    controller = SpeculationController(
        gate(probe_after_s=10.0),
        meter,
        WindowRule(tokens=10**9, busy_s=2.0),
        engine.set_drafting,
        clock=clock,
    )
    await drive(engine, controller, 40)
    assert engine.switches.count(True) >= 2  # the first try and at least one probe


async def test_a_probe_whose_drafts_fail_ends_after_a_few_steps_not_a_window() -> None:
    clock = Clock()
    meter = EngineMeter(clock=clock)
    engine = SimulatedEngine(meter, clock, on_rate=700.0, acceptance=0.0)
    rule = WindowRule(tokens=10**9, busy_s=2.0)  # a window: 2 busy seconds
    controller = SpeculationController(
        gate(probe_after_s=100.0), meter, rule, engine.set_drafting, clock=clock
    )
    await controller.step()  # the baseline: drafting off
    engine.run(2.5)
    await controller.step()  # the plain window closes: drafting on
    assert engine.drafting
    engine.run(0.3)  # three steps, 90 drafts, none accepted
    await controller.step()
    assert not engine.drafting  # judged after 0.3 s, not after the window's 2 s
    assert controller.gate.acceptance == 0.0


def test_only_a_clear_failure_closes_a_drafting_window_early() -> None:
    rule = WindowRule(tokens=100, busy_s=5.0, early_drafted=64)
    failing = Window(20, 0.2, drafted=64, accepted=9)  # 0.14 against a bar of 0.3
    assert rule.closes(failing, min_acceptance=0.3)
    assert not rule.closes(failing)  # drafting off: the rate rules alone
    assert not rule.closes(Window(20, 0.2, drafted=63, accepted=0), min_acceptance=0.3)
    assert not rule.closes(Window(30, 0.2, drafted=64, accepted=10), min_acceptance=0.3)


def test_window_rule() -> None:
    rule = WindowRule(tokens=100, busy_s=5.0, min_tokens=10)
    assert not rule.closes(Window(5, 50.0))  # too few tokens to judge
    assert rule.closes(Window(100, 0.5)) and rule.closes(Window(20, 5.0))
    assert not rule.closes(Window(50, 1.0))


def test_the_cpu_expansion_spreads_each_requests_value_over_its_tokens() -> None:
    temperatures = torch.tensor([0.2, -1.0, 0.7])
    cu = torch.tensor([2, 3, 6], dtype=torch.int32)
    out = _expand_batch_to_tokens(temperatures, cu, 6, replace_from=-1, replace_to=1)
    assert out.tolist() == pytest.approx([0.2, 0.2, 1.0, 0.7, 0.7, 0.7])
    assert out.dtype == torch.float32
