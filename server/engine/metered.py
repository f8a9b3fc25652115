"""``MeteredEngine``: any ``PolicyEngine``, with every generation recorded in the metrics."""

from __future__ import annotations

from collections.abc import Sequence

from server.metrics import ServerMetrics
from server.policy import Generation, PolicyEngine
from server.wire import SamplingSettings


class MeteredEngine:
    """Delegates to ``engine``; records time, queue wait, tokens and prefix-cache hits."""

    def __init__(self, engine: PolicyEngine, metrics: ServerMetrics):
        self._engine = engine
        self._metrics = metrics

    @property
    def policy_version(self) -> int:
        return self._engine.policy_version

    async def generate(
        self,
        prompt_ids: Sequence[int],
        sampling: SamplingSettings,
        *,
        stop_token_ids: Sequence[int] = (),
        request_id: str | None = None,
    ) -> Generation:
        generation = await self._engine.generate(
            prompt_ids, sampling, stop_token_ids=stop_token_ids, request_id=request_id
        )
        self._metrics.record_generation(generation)
        return generation
