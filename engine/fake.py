"""``FakeEngine``: a scripted policy for unit tests (its real twin is ``VLLMEngine``).

The script maps a prompt to the tokens to "sample"; logprobs are a fixed function of the
version (``-0.1 * (version + 1)``), so tests can tell versions apart in a trajectory. It
keeps the real engine's contract: a generation comes from one version (with ``finish``,
a swap waits for running generations), ``max_tokens`` and stop ids cut the output, so do
``stop`` texts when the fake is given a ``decode`` (the token completing one is kept; the
script is deterministic, so any ``seed`` is honoured; a ``constraint`` is kept in
``constraints``, not applied: the script says what is sampled; a generation cancelled
while it waits its ``latency_s`` raises ``Abandoned`` and counts in ``abandoned``), and
``cached_tokens`` counts the longest prefix shared with one of the last 256 contexts (a
stand-in for vLLM's prefix cache), reset by a swap. Made with ``max_lora_rank``, it takes
adapters only (as an engine with ``engine.lora``), and swaps them the same way.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from rollgym.contract.wire import SamplingSettings
from rollgym.engine.base import (
    Abandoned,
    AdapterWeights,
    FinishReason,
    Generation,
    Manifest,
    OutputConstraint,
    StagedWeights,
    Swap,
    TensorSpec,
    Weights,
)
from rollgym.engine.config import InFlightPolicy
from rollgym.engine.errors import NotEnabled

Script = Callable[[Sequence[int]], Sequence[int]]
FAKE_MANIFEST: Manifest = {"model.embed_tokens.weight": TensorSpec("F32", (8, 4))}


def fake_logprob(version: int) -> float:
    return -0.1 * (version + 1)


class FakeEngine:
    """See the module docstring. ``latency_s`` makes each generation take that long (a test
    may change it between calls)."""

    def __init__(
        self,
        script: Script,
        *,
        manifest: Manifest = FAKE_MANIFEST,
        latency_s: float = 0.0,
        in_flight: InFlightPolicy = "finish",
        decode: Callable[[Sequence[int]], str] | None = None,
        max_lora_rank: int | None = None,
    ):
        self._script = script
        self._max_lora_rank = max_lora_rank
        self._decode = decode
        self._manifest = manifest
        self.latency_s = latency_s
        self._in_flight: InFlightPolicy = in_flight
        self._version = 0
        self._running = 0
        self._idle = asyncio.Condition()
        self._swap_lock = asyncio.Lock()
        self._contexts: collections.deque[list[int]] = collections.deque(maxlen=256)
        self.swapped: list[Weights] = []
        self.prompts: list[list[int]] = []
        self.constraints: list[OutputConstraint | None] = []  # each generation's, unapplied
        self.abandoned = 0  # generations cancelled by their caller

    @property
    def policy_version(self) -> int:
        return self._version

    @property
    def in_flight_policy(self) -> InFlightPolicy:
        return self._in_flight

    @property
    def max_lora_rank(self) -> int | None:
        return self._max_lora_rank

    def manifest(self) -> Manifest:
        return self._manifest

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def tied_aliases(self) -> dict[str, str]:
        return {}

    async def init_nccl(self, init_info: dict[str, Any]) -> None:
        raise NotEnabled("the fake engine has no NCCL weight transfer")

    async def generate(
        self,
        prompt_ids: Sequence[int],
        sampling: SamplingSettings,
        *,
        stop_token_ids: Sequence[int] = (),
        stop: Sequence[str] = (),
        seed: int | None = None,
        request_id: str | None = None,
        constraint: OutputConstraint | None = None,
    ) -> Generation:
        async with self._swap_lock:  # wait while a swap runs
            self._running += 1
        try:
            version = self._version
            prompt = list(prompt_ids)
            self.prompts.append(prompt)
            self.constraints.append(constraint)
            cached = max((_common_prefix(prompt, c) for c in self._contexts), default=0)
            if self.latency_s:
                try:
                    await asyncio.sleep(self.latency_s)
                except asyncio.CancelledError:
                    self.abandoned += 1
                    raise Abandoned(0) from None  # the script's tokens come all at the end
            tokens, finish = _cut(
                self._script(prompt), sampling.max_tokens, stop_token_ids, self._stops(stop)
            )
            self._contexts.append(prompt + tokens)
            return Generation(
                token_ids=tokens,
                logprobs=[fake_logprob(version)] * len(tokens),
                finish_reason=finish,
                policy_version=version,
                prompt_tokens=len(prompt),
                cached_tokens=min(cached, len(prompt) - 1),
                model_s=self.latency_s,
            )
        finally:
            async with self._idle:
                self._running -= 1
                self._idle.notify_all()

    async def score(self, token_ids: Sequence[int]) -> list[float]:
        """``fake_logprob`` of the served version for each token after the first."""
        return [fake_logprob(self._version)] * (len(token_ids) - 1)

    def _stops(self, stop: Sequence[str]) -> Callable[[list[int]], bool]:
        """Whether tokens so far end the generation at one of the ``stop`` texts."""
        if not stop:
            return lambda tokens: False
        decode = self._decode
        if decode is None:
            raise NotEnabled("stop texts need a FakeEngine made with decode=...")
        return lambda tokens: any(text in decode(tokens) for text in stop)

    async def restore(self, weights: StagedWeights | AdapterWeights, version: int) -> None:
        self.swapped.append(weights)
        self._version = version

    async def swap_weights(self, weights: Weights, ready: Awaitable[object] | None = None) -> Swap:
        if isinstance(weights, AdapterWeights) != (self._max_lora_rank is not None):
            raise NotEnabled("the fake engine takes adapters only with max_lora_rank set")
        started = time.perf_counter()
        async with self._swap_lock:
            if ready is not None:
                await ready
            async with self._idle:
                await self._idle.wait_for(lambda: self._running == 0)
            self.swapped.append(weights)
            self._contexts.clear()
            self._version += 1
            return Swap(self._version, load_s=0.0, pause_s=time.perf_counter() - started)


def _cut(
    tokens: Sequence[int],
    max_tokens: int,
    stop: Sequence[int],
    stops_text: Callable[[list[int]], bool],
) -> tuple[list[int], FinishReason]:
    out: list[int] = []
    for token in tokens[:max_tokens]:
        out.append(token)
        if token in stop or stops_text(out):
            return out, "stop"
    return out, "length"


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
