"""``ObservedEngine``: any ``PolicyEngine``, with every generation handed to observers.

The server hangs its metrics and its dashboard on the one engine the runner and the
sessions share, so neither has to know about them; each call also counts as the current
request's engine time (``server.observability.timing``):

    policy = ObservedEngine(engine, metrics.record_generation, recorder.sampling_span)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rollgym.contract.wire import SamplingSettings
from rollgym.engine.base import Generation, OutputConstraint, PolicyEngine
from rollgym.server.observability.timing import engine_span

GenerationObserver = Callable[[Generation], None]


class ObservedEngine:
    """Delegates to ``engine``; calls each observer with every finished generation."""

    def __init__(self, engine: PolicyEngine, *observers: GenerationObserver):
        self._engine = engine
        self._observers = observers

    @property
    def policy_version(self) -> int:
        return self._engine.policy_version

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
        with engine_span():
            generation = await self._engine.generate(
                prompt_ids,
                sampling,
                stop_token_ids=stop_token_ids,
                stop=stop,
                seed=seed,
                request_id=request_id,
                constraint=constraint,
            )
        for observe in self._observers:
            observe(generation)
        return generation
