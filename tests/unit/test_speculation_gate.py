"""The speculation gate's rules, its controller on a simulated engine, the meter, and the
replay of vLLM's drafter over plain generations."""

from __future__ import annotations

import pytest
import torch

from rollgym.engine.vllm.speculation import (
    EngineMeter,
    Replayed,
    ShadowDrafts,
    SpeculationController,
    SpeculationGate,
    Window,
    WindowRule,
)
from rollgym.engine.vllm.worker_ext import _expand_batch_to_tokens


def gate(**overrides: float) -> SpeculationGate:
    options = {"min_acceptance": 0.3, "tolerance": 0.05, "probe_after_s": 10.0} | overrides
    return SpeculationGate(**options)  # type: ignore[arg-type]


PLAIN = Window(tokens=1000, busy_s=1.0)  # 1000 tokens per busy second, nothing replayed
# replayed: 30 steps of 3 drafts, 60 accepted: 3 tokens a step, 3x at a step cost of 1
PAYS = Window(tokens=1000, busy_s=1.0, shadow_drafted=90, shadow_accepted=60, shadow_tokens=90)


def on(g: SpeculationGate, now: float = 0.0) -> SpeculationGate:
    """``g`` switched on by a plain window whose replayed drafts would pay."""
    assert g.close_window(PAYS, now=now)
    return g


def test_it_serves_plain_and_measures_the_plain_rate() -> None:
    g = gate()
    assert not g.drafting and g.state == "off"
    assert not g.close_window(PLAIN, now=0.0)
    assert g.plain_speed == 1000.0 and g.switches == 0 and g.shadow_acceptance is None


def test_it_drafts_once_replayed_drafts_would_be_accepted_at_the_bar() -> None:
    g = gate()
    replayed = {"shadow_drafted": 100, "shadow_tokens": 100}
    assert not g.close_window(Window(1000, 1.0, shadow_accepted=29, **replayed), now=0)
    assert g.shadow_acceptance == 0.29
    assert g.close_window(Window(1000, 1.0, shadow_accepted=30, **replayed), now=1)
    assert g.switches == 1 and g.plain_speed == 1000.0


def test_it_drafts_only_when_the_would_be_speedup_clears_the_tolerance() -> None:
    g = gate(draft_step_cost=2.0)
    two_a_step = Window(1000, 1.0, shadow_drafted=90, shadow_accepted=45, shadow_tokens=90)
    assert not g.close_window(two_a_step, now=0)  # accepted at 0.5, but 2 / 2.0: no faster
    assert g.would_be_speedup == pytest.approx(1.0)
    assert g.close_window(PAYS, now=1)  # 3 / 2.0
    assert g.would_be_speedup == pytest.approx(1.5)


def test_a_try_measures_the_step_cost_and_output_like_it_is_not_tried_again() -> None:
    g = on(gate(draft_step_cost=1.0, probe_after_s=10.0), now=0.0)
    # 3 tokens a step yet 900 tokens/s against plain 1000: a step took 3.33 plain ones
    assert not g.close_window(Window(900, 1.0, drafted=600, accepted=600), now=1.0)
    assert g.step_cost == pytest.approx(3 * 1000 / 900)
    assert not g.close_window(PAYS, now=20.0)  # past the wait, but 3 / 3.33 a step
    four_a_step = Window(1000, 1.0, shadow_drafted=90, shadow_accepted=90, shadow_tokens=120)
    assert g.close_window(four_a_step, now=21.0)  # 4 / 3.33: more repetitive output pays


def test_a_short_drafting_window_says_nothing_of_the_step_cost() -> None:
    g = on(gate(draft_step_cost=1.5))
    g.close_window(Window(30, 0.1, drafted=64, accepted=3), now=1.0)  # 27 steps, under 64
    assert g.step_cost == 1.5 and not g.drafting


def test_too_few_replayed_drafts_say_nothing() -> None:
    g = gate(min_drafted=64)
    assert not g.close_window(Window(1000, 1.0, shadow_drafted=63, shadow_accepted=63), now=0)


def test_low_acceptance_switches_off_even_when_fast() -> None:
    g = on(gate())
    assert not g.close_window(Window(2000, 1.0, drafted=100, accepted=20), now=1.0)
    assert g.state == "off" and g.acceptance == 0.2 and g.next_probe_at == 11.0


def test_a_rate_below_plain_beyond_the_tolerance_switches_off() -> None:
    g = on(gate())
    assert g.close_window(Window(960, 1.0, drafted=100, accepted=90), now=1.0)  # -4%: on
    assert not g.close_window(Window(940, 1.0, drafted=100, accepted=90), now=2.0)  # -6%: off


def test_no_drafts_is_judged_by_rate_alone() -> None:
    g = on(gate())
    assert g.close_window(Window(1000, 1.0), now=1.0)
    assert g.acceptance is None


def test_tries_back_off_while_they_fail_and_reset_when_one_pays() -> None:
    g = on(gate(probe_after_s=10.0))
    bad = Window(500, 1.0, drafted=100, accepted=0)
    good = Window(1500, 1.0, drafted=100, accepted=80)
    g.close_window(bad, now=1.0)
    assert not g.close_window(PAYS, now=10.0)  # waits until 1 + 10
    assert g.close_window(PAYS, now=11.0)
    g.close_window(bad, now=12.0)
    assert g.next_probe_at == 32.0  # the wait doubled
    assert not g.close_window(PAYS, now=31.0)
    assert g.close_window(PAYS, now=32.0)
    assert g.close_window(good, now=33.0)  # pays: stays on, the wait resets
    g.close_window(bad, now=34.0)
    assert g.next_probe_at == 44.0


def test_the_wait_is_capped() -> None:
    g = on(gate(probe_after_s=10.0, max_probe_after_s=25.0))
    bad = Window(500, 1.0, drafted=100, accepted=0)
    now = 1.0
    for _ in range(4):
        g.close_window(bad, now=now)
        now = g.next_probe_at or now
        g.close_window(PAYS, now=now)
    assert g._wait_s == 25.0


def test_an_abandoned_switch_counts_as_a_failed_try() -> None:
    g = on(gate(probe_after_s=10.0))
    g.abandon(5.0)
    assert g.state == "off" and g.next_probe_at == 15.0


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
    """Plain at 1000 tokens/s; drafting at ``on_rate`` with drafts accepted at ``acceptance``;
    plain steps' replayed drafts would be accepted at ``replayed`` (default: ``acceptance``)."""

    def __init__(
        self,
        meter: EngineMeter,
        clock: Clock,
        *,
        on_rate: float,
        acceptance: float,
        replayed: float | None = None,
    ):
        self.meter, self.clock = meter, clock
        self.on_rate, self.acceptance = on_rate, acceptance
        self.replayed = acceptance if replayed is None else replayed
        self.drafting = False  # the gated engine starts plain
        self.switches: list[bool] = []

    async def set_drafting(self, on: bool) -> None:
        self.drafting = on
        self.switches.append(on)

    def run(self, seconds: float) -> None:
        """Busy steps of 0.1 s, each with 30 drafts made or replayed."""
        for _ in range(round(seconds * 10)):
            self.clock.now += 0.1
            if self.drafting:
                accepted = round(30 * self.acceptance)
                self.meter.step(
                    generated=round(self.on_rate * 0.1),
                    prompt=0,
                    running=1,
                    drafted=30,
                    accepted=accepted,
                )
            else:
                self.meter.step(generated=100, prompt=0, running=1)
                self.meter.shadow(Replayed(30, round(30 * self.replayed), tokens=100))


def controller_for(
    engine: SimulatedEngine, g: SpeculationGate, **rule: float
) -> SpeculationController:
    window = WindowRule(**({"tokens": 10**9, "busy_s": 2.0} | rule))  # type: ignore[arg-type]
    return SpeculationController(g, engine.meter, window, engine.set_drafting, clock=engine.clock)


async def drive(engine: SimulatedEngine, controller: SpeculationController, seconds: float):
    for _ in range(round(seconds)):
        engine.run(1.0)
        await controller.step()


@pytest.mark.parametrize(
    ("on_rate", "acceptance", "switches"),
    [(1500.0, 0.8, [True]), (800.0, 0.8, [True, False]), (1200.0, 0.1, [])],
)
async def test_the_controller_keeps_the_better_mode(on_rate, acceptance, switches):
    clock = Clock()
    engine = SimulatedEngine(
        EngineMeter(clock=clock), clock, on_rate=on_rate, acceptance=acceptance
    )
    controller = controller_for(engine, gate(probe_after_s=100.0))
    await drive(engine, controller, 30)
    assert engine.switches == switches  # drafts that would not pay never start an engine
    assert controller.gate.plain_speed == pytest.approx(1000.0, rel=0.05)


async def test_the_controller_does_not_repeat_a_try_that_failed_on_like_output() -> None:
    clock = Clock()
    engine = SimulatedEngine(EngineMeter(clock=clock), clock, on_rate=800.0, acceptance=0.8)
    controller = controller_for(engine, gate(probe_after_s=10.0))
    await drive(engine, controller, 40)  # four waits of 10 s
    assert engine.switches == [True, False]
    assert controller.gate.would_be_speedup < 1.0  # the try's step cost, applied to the replay


async def test_a_try_whose_drafts_fail_ends_after_a_few_steps_not_a_window() -> None:
    clock = Clock()
    meter = EngineMeter(clock=clock)
    # the replay promised 0.8 (say the load changed the output), the drafts get nothing
    engine = SimulatedEngine(meter, clock, on_rate=700.0, acceptance=0.0, replayed=0.8)
    controller = controller_for(engine, gate(probe_after_s=100.0))  # a window: 2 busy s
    engine.run(2.5)
    await controller.step()  # the plain window closes: drafting on
    assert engine.drafting
    engine.run(0.3)  # three steps, 90 drafts, none accepted
    await controller.step()
    assert not engine.drafting  # judged after 0.3 s, not after the window's 2 s
    assert controller.gate.acceptance == 0.0


async def test_a_switch_that_fails_leaves_the_plain_engine_serving() -> None:
    clock = Clock()
    engine = SimulatedEngine(EngineMeter(clock=clock), clock, on_rate=1500.0, acceptance=0.8)

    async def broken(on: bool) -> None:
        raise RuntimeError("the engine did not start")

    controller = SpeculationController(
        gate(probe_after_s=10.0), engine.meter, WindowRule(10**9, 2.0), broken, clock=clock
    )
    engine.run(2.5)
    await controller.step()
    assert not controller.applied and controller.gate.state == "off"
    assert controller.gate.next_probe_at == pytest.approx(12.5)


def shadow(k: int = 3) -> ShadowDrafts:
    return ShadowDrafts(
        num_speculative_tokens=k, prompt_lookup_min=1, prompt_lookup_max=3, max_model_len=512
    )


def test_the_replay_drafts_at_most_k_tokens_a_step() -> None:
    prompt, output = [1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6]  # the output copies the prompt
    # the first output token comes from the prefill; then a step of 3 drafts + 1 token,
    # then 1 draft: the generation ends there
    assert shadow(k=3).replay(prompt, output) == Replayed(4, 4, tokens=6)
    assert shadow(k=1).replay(prompt, output) == (3, 3, 6)  # three steps of 1 draft + 1 token


def test_a_wrong_draft_ends_the_step_at_the_token_generated() -> None:
    # after the prefill's "1", the drafter proposes what followed 1 in the prompt (2 3 4):
    # 2 and 3 are right, 4 is not (9 was generated): the step ends past "2 3 9"
    assert shadow().replay([1, 2, 3, 4, 5], [1, 2, 3, 9]) == (3, 2, 4)


async def test_the_controller_replays_what_was_served_into_the_meter() -> None:
    clock = Clock()
    meter = EngineMeter(clock=clock)
    controller = SpeculationController(
        gate(), meter, WindowRule(10**9, 10**9), _never, shadow=shadow(), clock=clock
    )
    controller.observe([7, 8, 9], [7, 8, 9, 7, 8, 9])
    controller.observe([1, 2, 3], [4, 5, 6])
    await controller.step()
    assert (meter.shadow_drafted, meter.shadow_accepted, meter.shadow_tokens) == (4, 4, 9)
    await controller.step()  # replayed once only
    assert (meter.shadow_drafted, meter.shadow_accepted, meter.shadow_tokens) == (4, 4, 9)


async def _never(on: bool) -> None:
    raise AssertionError("switched")


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
