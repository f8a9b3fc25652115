"""Speculative decoding under a gate: drafts are served only while they measurably pay.

vLLM's n-gram speculative decoding drafts the next few tokens by finding the last few
generated tokens earlier in the context and proposing what followed them; the target
model checks all drafts in one forward pass and keeps the longest correct prefix. It pays
on repetitive output (code edits, copies, structured answers) and costs on short sampled
answers, where drafts are rarely right and each check is wasted work. It also costs when
no draft is made: vLLM runs a speculative engine without asynchronous scheduling, 0.78x
the plain engine's rate on short answers of the default model (``bench.cost``). So the
gate serves from a **plain** engine and builds a speculative one only when the drafts
would pay, judged window by window (``EngineMeter`` windows of the engine's own steps):

* **off** (a plain engine): each window measures the plain rate and replays vLLM's own
  n-gram drafter over the generations it served (``ShadowDrafts``): how many drafts it
  would have made, how many the target would have accepted, and so how many tokens each
  engine step would have yielded per request (one plus the drafts accepted). A drafting
  step costs more than a plain one (it checks the drafts; vLLM schedules it
  synchronously): ``step_cost`` times as long per request. The would-be speedup is
  ``tokens per step / step_cost``. When it reaches ``1 + tolerance`` and the would-be
  acceptance reaches ``min_acceptance`` (over at least ``min_drafted`` drafts), the
  server switches to a speculative engine;
* **on** (a speculative engine): at each window's close, ``acceptance = accepted /
  drafted`` from vLLM's spec-decode counters, and the window measures ``step_cost``
  (its tokens per step times the plain rate over its rate), which replaces the
  configured guess (``draft_step_cost``) from then on. It switches back to plain when
  ``acceptance < min_acceptance`` or when the rate falls below ``(1 - tolerance) x`` the
  plain rate measured before; a window whose drafts are accepted at under half the bar
  closes early (``WindowRule``). After a switch back, drafting is not tried again for
  ``probe_after_s``, doubling while tries fail, up to ``max_probe_after_s``; a try that
  pays resets it. A failed try also taught the gate the step cost, so output no more
  repetitive than what failed is not tried again.

The replay is exact for greedy decoding and exact in expectation for sampling: vLLM
accepts an n-gram draft token with the target's probability of it (the draft has no
distribution of its own) and otherwise samples the target without that token, so a draft
is accepted exactly when the token sampled equals it, and tokens sampled without drafts
have the same distribution. So no time is spent drafting to find out that drafts fail.

Speeds are tokens per *sequence-second*: generated tokens over the time each running
request spent in the engine (the busy time weighted by how many were running), so idle
time counts against neither mode and a window with fewer requests in flight (a batch's
tail) is not mistaken for a slower mode, as tokens per wall second would be. They still
depend on the load somewhat: a window is compared with the plain window before it, and a
changing load can make one try wrong; the next window or try corrects it. The recorded
logprobs are the target model's either way (vLLM computes accepted tokens' logprobs from
the target's logits).

How the switch works (``VLLMEngine.set_drafting``): the new engine starts beside the old
one, which keeps serving; it gets the current weights and version; new requests go to it
while the old one finishes its running requests, then the old one shuts down. A switch
costs an engine start (seconds of CPU) and, briefly, two engines' memory, which is why
the gate only switches on evidence.

    >>> gate = SpeculationGate(min_acceptance=0.5, tolerance=0.05, probe_after_s=10,
    ...                        draft_step_cost=1.5)
    >>> gate.drafting
    False
    >>> few = Window(1000, 1.0, shadow_drafted=90, shadow_accepted=10, shadow_tokens=100)
    >>> gate.close_window(few, now=0.0), round(gate.would_be_speedup, 2)  # 100/90 a step
    (False, 0.74)
    >>> many = Window(1000, 1.0, shadow_drafted=90, shadow_accepted=70, shadow_tokens=100)
    >>> gate.close_window(many, now=1.0), round(gate.would_be_speedup, 2)  # 100/30 a step
    (True, 2.22)
    >>> gate.close_window(Window(900, 1.0, drafted=900, accepted=100), now=2.0)
    False
    >>> gate.state, gate.next_probe_at, round(gate.step_cost, 2)  # 900/800 x 1000/900
    ('off', 12.0, 1.25)
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

State = Literal["off", "on"]


@dataclasses.dataclass(frozen=True)
class Window:
    """The engine's steps over one measurement window."""

    tokens: int  # generated tokens (accepted drafts included)
    busy_s: float  # time with requests running
    drafted: int = 0
    accepted: int = 0
    sequence_s: float | None = None  # busy time x requests running; None: one at a time
    shadow_drafted: int = 0  # what the drafter would have drafted (``ShadowDrafts``)...
    shadow_accepted: int = 0  # ... and the target would have accepted, plain generations...
    shadow_tokens: int = 0  # ... over this many generated tokens

    @property
    def speed(self) -> float:
        """Tokens per sequence-second (per busy second when ``sequence_s`` is unknown)."""
        time_s = self.busy_s if self.sequence_s is None else self.sequence_s
        return self.tokens / time_s if time_s > 0 else 0.0

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def shadow_acceptance(self) -> float | None:
        return self.shadow_accepted / self.shadow_drafted if self.shadow_drafted else None

    @property
    def tokens_per_step(self) -> float | None:
        """Tokens per request per engine step: each step yields one plus its accepted drafts."""
        return tokens_per_step(self.tokens, self.accepted)

    @property
    def shadow_tokens_per_step(self) -> float | None:
        """The same, had the replayed generations been served with drafts."""
        return tokens_per_step(self.shadow_tokens, self.shadow_accepted)


def tokens_per_step(tokens: int, accepted: int) -> float | None:
    """Tokens per request per engine step, ``accepted`` of the ``tokens`` being drafts."""
    steps = tokens - accepted
    return tokens / steps if steps > 0 else None


def drafting_step_cost(per_step: float, plain_speed: float, drafting_speed: float) -> float:
    """A drafting step's time over a plain one's, per request: a drafting step yields
    ``per_step`` tokens at ``drafting_speed``, a plain step one token at ``plain_speed``,
    so a drafting step takes ``per_step x plain_speed / drafting_speed`` plain steps."""
    return per_step * plain_speed / drafting_speed


class SpeculationGate:
    """Decides, window by window, whether to serve with drafts (see the module docstring)."""

    def __init__(
        self,
        *,
        min_acceptance: float,
        tolerance: float,
        probe_after_s: float,
        max_probe_after_s: float | None = None,
        min_drafted: int = 64,
        draft_step_cost: float = 1.0,
    ):
        self.min_acceptance = min_acceptance
        self.tolerance = tolerance
        self.probe_after_s = probe_after_s
        self.max_probe_after_s = max_probe_after_s or 16 * probe_after_s
        self.min_drafted = min_drafted
        self.state: State = "off"
        self.plain_speed: float | None = None  # tokens per sequence-second, plain engine
        self.on_speed: float | None = None  # ... drafting, last window
        self.acceptance: float | None = None  # last window drafting
        self.shadow_acceptance: float | None = None  # last plain window's would-be one
        self.would_be_speedup: float | None = None  # ... and its drafting rate over plain
        self.step_cost = draft_step_cost  # a drafting step over a plain one; tries measure it
        self.switches = 0
        self.next_probe_at: float | None = None  # no try of drafting before this
        self.on_busy_s = 0.0  # busy time of the windows drafting
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
            self._measure_step_cost(window)
            self._judge(now)
        else:
            self.plain_speed = window.speed
            self.shadow_acceptance = window.shadow_acceptance
            per_step = window.shadow_tokens_per_step
            self.would_be_speedup = per_step / self.step_cost if per_step else None
            if self._drafts_would_pay(window, now):
                self._switch("on")
        return self.drafting

    def abandon(self, now: float) -> None:
        """The switch to drafting failed (the engine did not start): off, as a failed try."""
        if self.drafting:
            self._fail(now)

    def _drafts_would_pay(self, window: Window, now: float) -> bool:
        waited = self.next_probe_at is None or now >= self.next_probe_at
        enough = window.shadow_drafted >= self.min_drafted
        accepted = window.shadow_accepted >= self.min_acceptance * window.shadow_drafted
        faster = (self.would_be_speedup or 0.0) >= 1 + self.tolerance
        return waited and enough and accepted and faster

    def _measure_step_cost(self, window: Window) -> None:
        """A drafting window's step time over the plain one's, per request: its tokens per
        step at the plain rate, over its rate. Windows of few steps say too little."""
        per_step, plain = window.tokens_per_step, self.plain_speed
        if (
            per_step
            and plain
            and window.speed
            and window.tokens - window.accepted >= self.min_drafted
        ):
            self.step_cost = drafting_step_cost(per_step, plain, window.speed)

    def _judge(self, now: float) -> None:
        low_acceptance = self.acceptance is not None and self.acceptance < self.min_acceptance
        floor = (1 - self.tolerance) * (self.plain_speed or 0.0)
        slower = self.on_speed is not None and self.on_speed < floor
        if low_acceptance or slower:
            self._fail(now)
        else:
            self._wait_s = self.probe_after_s  # it pays: the next failure waits the least

    def _fail(self, now: float) -> None:
        self._switch("off")
        self.next_probe_at = now + self._wait_s
        self._wait_s = min(2 * self._wait_s, self.max_probe_after_s)

    def _switch(self, state: State) -> None:
        if state != self.state:
            self.switches += 1
        self.state = state


Propose = Callable[["np.ndarray"], "np.ndarray"]


class Replayed(NamedTuple):
    """What the drafter would have drafted, the target accepted, over so many tokens."""

    drafted: int
    accepted: int
    tokens: int


class ShadowDrafts:
    """Replays vLLM's n-gram drafter over generations served without it.

    ``replay`` walks a generation as a speculative engine would have decoded it: the first
    token comes from the prefill; at each later step the drafter proposes up to
    ``num_speculative_tokens`` from the context so far (vLLM's own function, the one its
    ``NgramProposer`` runs), the longest prefix equal to the tokens actually generated is
    accepted, and the step moves past it and one more token. Drafts past the generation's
    end are not counted: their verdicts depend on tokens never generated (vLLM drafts up to
    ``num_speculative_tokens`` past a length cap or a stop token), so a generation's last
    step can differ from the engine's counters by that many drafts.

    Generations are queued by ``add`` (the serving path: no work) and replayed by
    ``replay_pending`` off it; the queue keeps the latest ``capacity``: a sample suffices.

        >>> shadow = ShadowDrafts(num_speculative_tokens=3, prompt_lookup_min=1,
        ...                       prompt_lookup_max=3, max_model_len=512)
        >>> shadow.replay([7, 8, 9], [7, 8, 9, 7, 8, 9])  # drafts "8 9 7", then "9": all right
        Replayed(drafted=4, accepted=4, tokens=6)
        >>> shadow.replay([1, 2, 3], [4, 5, 6])  # nothing repeats: nothing drafted
        Replayed(drafted=0, accepted=0, tokens=3)
    """

    def __init__(
        self,
        *,
        num_speculative_tokens: int,
        prompt_lookup_min: int,
        prompt_lookup_max: int,
        max_model_len: int,
        capacity: int = 256,
        propose: Propose | None = None,
    ):
        if propose is None:
            propose = _vllm_ngram_proposer(
                num_speculative_tokens, prompt_lookup_min, prompt_lookup_max, max_model_len
            )
        self._propose = propose
        self._pending: collections.deque[tuple[Sequence[int], Sequence[int]]] = collections.deque(
            maxlen=capacity
        )

    def add(self, prompt_ids: Sequence[int], output_ids: Sequence[int]) -> None:
        self._pending.append((prompt_ids, output_ids))

    def replay_pending(self) -> Replayed:
        """Replay every queued generation; the sum over them all."""
        total = Replayed(0, 0, 0)
        while self._pending:
            one = self.replay(*self._pending.popleft())
            total = Replayed(*(a + b for a, b in zip(total, one, strict=True)))
        return total

    def replay(self, prompt_ids: Sequence[int], output_ids: Sequence[int]) -> Replayed:
        """What the drafter would have drafted and got accepted over this generation."""
        import numpy as np

        tokens = np.asarray([*prompt_ids, *output_ids], dtype=np.int32)
        position, end = len(prompt_ids) + 1, len(tokens)
        drafted = accepted = 0
        while position < end:
            drafts = self._propose(tokens[:position])[: end - position]
            matched = 0
            while matched < len(drafts) and drafts[matched] == tokens[position + matched]:
                matched += 1
            drafted, accepted = drafted + len(drafts), accepted + matched
            position += matched + 1
        return Replayed(drafted, accepted, len(output_ids))


def _vllm_ngram_proposer(k: int, min_n: int, max_n: int, max_model_len: int) -> Propose:
    """vLLM's n-gram lookup (numba-compiled on first use) with the engine's settings."""
    from vllm.v1.spec_decode.ngram_proposer import (
        _find_longest_matched_ngram_and_propose_tokens as find,
    )

    return lambda context: find(context, min_n, max_n, max_model_len, k)


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
        self.shadow_drafted = 0
        self.shadow_accepted = 0
        self.shadow_tokens = 0
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

    def shadow(self, replayed: Replayed) -> None:
        """Add what ``ShadowDrafts`` replayed over plain generations."""
        self.shadow_drafted += replayed.drafted
        self.shadow_accepted += replayed.accepted
        self.shadow_tokens += replayed.tokens

    def totals(self) -> Window:
        return Window(
            self.generated_tokens,
            self.busy_s,
            self.drafted,
            self.accepted,
            self.sequence_s,
            self.shadow_drafted,
            self.shadow_accepted,
            self.shadow_tokens,
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
            now.shadow_drafted - then.shadow_drafted,
            now.shadow_accepted - then.shadow_accepted,
            now.shadow_tokens - then.shadow_tokens,
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
    """Runs the gate against the engine: every ``poll_s``, replay the plain generations
    served (``observe``), close a window when it is due, and switch engines when the gate
    says so. ``set_drafting`` does the switch; the engine starts in the gate's state."""

    def __init__(
        self,
        gate: SpeculationGate,
        meter: EngineMeter,
        rule: WindowRule,
        set_drafting: Callable[[bool], Awaitable[None]],
        *,
        shadow: ShadowDrafts | None = None,
        poll_s: float = 0.5,
        clock: Callable[[], float] = time.time,
    ):
        self.gate, self.meter, self.rule, self.shadow = gate, meter, rule, shadow
        self._set_drafting = set_drafting
        self._poll_s = poll_s
        self._clock = clock
        self.applied = gate.drafting

    def observe(self, prompt_ids: Sequence[int], output_ids: Sequence[int]) -> None:
        """A generation the plain engine served, queued for the replay."""
        if self.shadow is not None:
            self.shadow.add(prompt_ids, output_ids)

    async def step(self) -> None:
        """One look at the meter (the loop's body; tests call it directly)."""
        if self.shadow is not None:
            self.meter.shadow(self.shadow.replay_pending())
        now = self._clock()
        window = self.meter.since_mark()
        drafting_bar = self.gate.min_acceptance if self.gate.drafting else None
        if not self.rule.closes(window, min_acceptance=drafting_bar):
            return
        drafting = self.gate.close_window(window, now=now)
        self.meter.mark()
        if drafting == self.applied:
            return
        try:
            await self._set_drafting(drafting)
        except Exception:
            logger.exception(
                "switching speculative decoding %s failed", "on" if drafting else "off"
            )
            self.gate.abandon(self._clock())
            return
        self.applied = drafting
        self.meter.mark()  # the next window is all in the new mode

    async def run(self) -> None:
        """``step`` every ``poll_s`` until cancelled; a failed step is logged, not fatal."""
        while True:
            try:
                await self.step()
            except Exception:
                logger.exception("speculation gate step failed")
            await asyncio.sleep(self._poll_s)
