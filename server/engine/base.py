"""``ServingEngine``: what the app needs of an engine beyond sampling and weight swaps."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from rollgym.server.policy import PolicyEngine
from rollgym.server.weights.base import StagedWeights, WeightTarget


@runtime_checkable
class ServingEngine(PolicyEngine, WeightTarget, Protocol):
    """A ``PolicyEngine`` and ``WeightTarget`` with a life (``start``/``close``)."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def restore(self, weights: StagedWeights, version: int) -> None:
        """Serve ``weights`` as ``version``: a restarted server resuming its last update."""
        ...

    def tied_aliases(self) -> dict[str, str]:
        """Alternative tensor names an update may use (see ``safetensors_check.stage``)."""
        ...

    async def init_nccl(self, init_info: dict[str, Any]) -> None:
        """Join the trainer's NCCL group; ``NotEnabled`` where there is none."""
        ...
