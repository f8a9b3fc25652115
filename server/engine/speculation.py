"""Speculative decoding under a gate: drafts stay on only while they measurably pay.

vLLM's n-gram speculative decoding drafts the next few tokens by finding the last few
generated tokens earlier in the context and proposing what followed them; the target
model checks all drafts in one forward pass and keeps the longest correct prefix. It pays
on repetitive output (code edits, copies, structured answers) and costs on short sampled
answers, where drafts are rarely right and each check is wasted work. So the engine runs
it under ``SpeculationGate``, fed by ``EngineMeter`` windows of the engine's own steps:

* **baseline**: drafting off for one window: the plain rate, ``tokens / busy second``;
* **on**: drafting on; at each window's close, ``acceptance = accepted / drafted``. It
  switches off when ``acceptance < min_acceptance`` or when the rate falls below
  ``(1 - tolerance) x`` the plain rate measured just before, and stays on otherwise; a
  window whose drafts are accepted at under half the bar closes early (``WindowRule``);
* **off**: drafting off; each window refreshes the plain rate; after ``probe_after_s``
  it probes (on again for a window). Each failed probe doubles the wait, up to
  ``max_probe_after_s``; a probe that pays resets it.

Speeds are tokens per *sequence-second*: generated tokens over the time each running
request spent in the engine (the busy time weighted by how many were running), so idle
time counts against neither mode and a window with fewer requests in flight (a batch's
tail) is not mistaken for a slower mode, as tokens per wall second would be. They still
depend on the load somewhat: a window is compared with the plain window just before it,
and a changing load can make one probe wrong; the next window or probe corrects it. The recorded logprobs are the target model's either way
(vLLM computes accepted tokens' logprobs from the target's logits).

How the switch works: the engine starts with vLLM's speculative config, so its drafter
exists for good; switching off makes the drafter propose nothing
(``worker_ext.rollgym_set_drafting``), and the scheduler then schedules plain decoding
steps. The alternatives, measured in ``bench.cost``: restarting the engine with or without
the config (an engine start, the prefix cache and the current weights reloaded, no
generation meanwhile) or two engines (twice the memory, every weight update twice).

    >>> gate = SpeculationGate(min_acceptance=0.5, tolerance=0.05, probe_after_s=10)
    >>> gate.drafting
    False
    >>> gate.close_window(Window(tokens=1000, busy_s=1.0), now=0.0)  # plain: 1000 tok/s
    True
    >>> gate.close_window(Window(tokens=1500, busy_s=1.0, drafted=900, accepted=700), now=1.0)
    True
    >>> gate.close_window(Window(tokens=900, busy_s=1.0, drafted=900, accepted=100), now=2.0)
    False
    >>> gate.state, gate.next_probe_at
    ('off', 12.0)
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal

logger = logging.getLogger(__name__)

State = Literal["baseline", "on", "off"]


@dataclasses.dataclass(frozen=True)
class Window:
    """The engine's steps over one measurement window."""

    tokens: int  # generated tokens (accepted drafts included)
    busy_s: float  # time with requests running
    drafted: int = 0
    accepted: int = 0
    sequence_s: float | None = None  # busy time x requests running; None: one at a time

    @property
    def speed(self) -> float:
        """Tokens per sequence-second (per busy second when ``sequence_s`` is unknown)."""
        time_s = self.busy_s if self.sequence_s is None else self.sequence_s
        return self.tokens / time_s if time_s > 0 else 0.0

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None


class SpeculationGate:
    """Decides, window by window, whether the drafter drafts (see the module docstring)."""

    def __init__(
        self,
        *,
        min_acceptance: float,
        tolerance: float,
        probe_after_s: float,
        max_probe_after_s: float | None = None,
    ):
        self.min_acceptance = min_acceptance
        self.tolerance = tolerance
        self.probe_after_s = probe_after_s
        self.max_probe_after_s = max_probe_after_s or 16 * probe_after_s
        self.state: State = "baseline"
        self.plain_speed: float | None = None  # tokens per sequence-second, drafting off
        self.on_speed: float | None = None  # ... drafting on, last window
        self.acceptance: float | None = None  # last window with drafts
        self.switches = 0
        self.next_probe_at: float | None = None
        self.on_busy_s = 0.0  # busy time of the windows with drafting on
        self._wait_s = probe_after_s

    @property
    def drafting(self) -> bool:
        return self.state == "on"

    def close_window(self, window: Window, *, now: float) -> bool:
        """Judge a finished window; returns whether to draft in the next one."""
        if self.state == "on":
            self.on_busy_s += window.busy_s
            self.on_speed = window.speed
            self.acceptance = window.acceptance
            self._judge(now)
        else:
            self.plain_speed = window.speed
            if self.state == "baseline":
                self._switch("on")
        return self.drafting

    def tick(self, now: float) -> bool:
        """Time passes: an off gate probes when its wait is over. Returns ``drafting``."""
        if self.state == "off" and self.next_probe_at is not None and now >= self.next_probe_at:
            self._switch("on")
        return self.drafting

    def _judge(self, now: float) -> None:
        low_acceptance = self.acceptance is not None and self.acceptance < self.min_acceptance
        floor = (1 - self.tolerance) * (self.plain_speed or 0.0)
        slower = self.on_speed is not None and self.on_speed < floor
        if low_acceptance or slower:
            self._switch("off")
            self.next_probe_at = now + self._wait_s
            self._wait_s = min(2 * self._wait_s, self.max_probe_after_s)
        else:
            self._wait_s = self.probe_after_s  # it pays: the next failure waits the least

    def _switch(self, state: State) -> None:
        if state == "on":
            self.next_probe_at = None
        if (state == "on") != self.drafting:
            self.switches += 1
        self.state = state


class EngineMeter:
    """Adds up the engine's steps (vLLM's stat-logger records) into windows.

    ``step`` is called once per engine step with that step's generated and prompt tokens,
    how many requests are running, and the spec-decode counters; the time since the
    previous step is busy when requests were running then or now, and counts once per
    request that was running (``sequence_s``).
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self.generated_tokens = 0
        self.prompt_tokens = 0
        self.busy_s = 0.0
        self.sequence_s = 0.0
        self.drafted = 0
        self.accepted = 0
        self.drafts = 0
        self._last_step: float | None = None
        self._running = 0
        self._mark = Window(0, 0.0, sequence_s=0.0)

    def step(
        self,
        *,
        generated: int,
        prompt: int,
        running: int,
        drafts: int = 0,
        drafted: int = 0,
        accepted: int = 0,
    ) -> None:
        now = self._clock()
        if self._last_step is not None and (self._running or running):
            elapsed = now - self._last_step
            self.busy_s += elapsed
            self.sequence_s += elapsed * max(self._running, running)
        self._last_step, self._running = now, running
        self.generated_tokens += generated
        self.prompt_tokens += prompt
        self.drafts += drafts
        self.drafted += drafted
        self.accepted += accepted

    def totals(self) -> Window:
        return Window(
            self.generated_tokens, self.busy_s, self.drafted, self.accepted, self.sequence_s
        )

    def since_mark(self) -> Window:
        """The window since the last ``mark``."""
        now, then = self.totals(), self._mark
        return Window(
            now.tokens - then.tokens,
            now.busy_s - then.busy_s,
            now.drafted - then.drafted,
            now.accepted - then.accepted,
            (now.sequence_s or 0.0) - (then.sequence_s or 0.0),
        )

    def mark(self) -> None:
        self._mark = self.totals()


@dataclasses.dataclass(frozen=True)
class WindowRule:
    """When a window closes: ``tokens`` generated or ``busy_s`` busy, whichever first, and
    never before ``min_tokens`` (too few tokens say nothing about a rate).

    A window of drafting (``min_acceptance`` given) also closes as soon as it holds
    ``early_drafted`` drafted tokens accepted at under half of ``min_acceptance``: so far
    below the bar that the rest of the window could not change the verdict (at 64 drafts
    an acceptance of 0.15 lies 2.3 standard errors under 0.3), so a probe on output where
    drafts never pay costs a few engine steps instead of a whole window::

        >>> rule = WindowRule(tokens=2048, busy_s=10.0)
        >>> rule.closes(Window(tokens=22, busy_s=0.1, drafted=64, accepted=3), min_acceptance=0.3)
        True
        >>> rule.closes(Window(tokens=40, busy_s=0.1, drafted=64, accepted=16), min_acceptance=0.3)
        False
    """

    tokens: int
    busy_s: float
    min_tokens: int = 32
    early_drafted: int = 64

    def closes(self, window: Window, *, min_acceptance: float | None = None) -> bool:
        if min_acceptance is not None and self._drafts_clearly_fail(window, min_acceptance):
            return True
        if window.tokens < self.min_tokens:
            return False
        return window.tokens >= self.tokens or window.busy_s >= self.busy_s

    def _drafts_clearly_fail(self, window: Window, min_acceptance: float) -> bool:
        enough = window.drafted >= self.early_drafted
        return enough and window.accepted < window.drafted * min_acceptance / 2


def metering_stat_logger(meter: EngineMeter, vllm_config: Any, engine_index: int = 0) -> Any:
    """A vLLM stat logger that logs nothing and hands each engine step to ``meter``."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class MeteringStatLogger(StatLoggerBase):
        def __init__(self, vllm_config: Any, engine_index: int = 0):
            pass

        def record(
            self, scheduler_stats: Any, iteration_stats: Any, *args: Any, **kwargs: Any
        ) -> None:
            spec = getattr(scheduler_stats, "spec_decoding_stats", None)
            meter.step(
                generated=iteration_stats.num_generation_tokens if iteration_stats else 0,
                prompt=iteration_stats.num_prompt_tokens if iteration_stats else 0,
                running=scheduler_stats.num_running_reqs if scheduler_stats else 0,
                drafts=spec.num_drafts if spec else 0,
                drafted=spec.num_draft_tokens if spec else 0,
                accepted=spec.num_accepted_tokens if spec else 0,
            )

        def log_engine_initialized(self) -> None:
            pass

    return MeteringStatLogger(vllm_config, engine_index)


class SpeculationController:
    """Runs the gate against the engine: every ``poll_s``, close a window or tick, and
    switch the drafter when the gate says so. ``set_drafting`` reaches the workers."""

    def __init__(
        self,
        gate: SpeculationGate,
        meter: EngineMeter,
        rule: WindowRule,
        set_drafting: Callable[[bool], Awaitable[None]],
        *,
        poll_s: float = 0.5,
        clock: Callable[[], float] = time.time,
    ):
        self.gate, self.meter, self.rule = gate, meter, rule
        self._set_drafting = set_drafting
        self._poll_s = poll_s
        self._clock = clock
        self.applied: bool | None = None

    async def step(self) -> None:
        """One look at the meter (the loop's body; tests call it directly)."""
        now = self._clock()
        window = self.meter.since_mark()
        drafting_bar = self.gate.min_acceptance if self.gate.drafting else None
        if self.rule.closes(window, min_acceptance=drafting_bar):
            drafting = self.gate.close_window(window, now=now)
            self.meter.mark()
        else:
            drafting = self.gate.tick(now)
        if drafting != self.applied:
            await self._set_drafting(drafting)
            self.applied = drafting
            self.meter.mark()  # the next window is all in the new mode

    async def run(self) -> None:
        """``step`` every ``poll_s`` until cancelled; a failed switch is logged, not fatal."""
        while True:
            try:
                await self.step()
            except Exception:
                logger.exception("speculation gate step failed")
            await asyncio.sleep(self._poll_s)
