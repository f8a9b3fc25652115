"""The seam between weight updates and the engine that serves them.

A ``WeightTarget`` (the vLLM engine, or the fake in unit tests) describes the tensors it
serves (a ``Manifest``) and swaps in weights that were checked against it. Two sources:

* ``StagedWeights``: safetensors files on local disk (an upload, or a shared volume). The
  CPU path and the general one: the engine's workers reload them in checkpoint format.
* ``NcclWeights``: tensors the trainer broadcasts over NCCL (vLLM's native weight
  transfer). GPU hosts only; it cannot run on the CPU build rollgym is developed on.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Awaitable, Mapping
from pathlib import Path
from typing import Protocol, runtime_checkable

from rollgym.server.config import InFlightPolicy


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """A tensor's safetensors dtype code (``F32``, ``BF16``...) and shape."""

    dtype: str
    shape: tuple[int, ...]


Manifest = Mapping[str, TensorSpec]


@dataclasses.dataclass(frozen=True)
class StagedWeights:
    """Safetensors files whose tensors match the manifest exactly.

    ``renames`` maps a name in the files to the name the engine loads it as (a tied
    ``lm_head.weight`` sent instead of the embedding); ``skip`` lists names not to load.
    """

    files: tuple[Path, ...]
    nbytes: int
    renames: Mapping[str, str] = dataclasses.field(default_factory=dict)
    skip: frozenset[str] = frozenset()


@dataclasses.dataclass(frozen=True)
class NcclWeights:
    """The tensors of one NCCL broadcast, in the order the trainer sends them."""

    names: tuple[str, ...]
    dtype_names: tuple[str, ...]  # torch names: "float32", "bfloat16", ...
    shapes: tuple[tuple[int, ...], ...]

    @property
    def nbytes(self) -> int:
        from rollgym.server.weights.safetensors_check import ITEM_SIZE, TORCH_DTYPE

        sizes = [ITEM_SIZE.get(TORCH_DTYPE.get(d, ""), 0) for d in self.dtype_names]
        return sum(size * math.prod(shape) for size, shape in zip(sizes, self.shapes, strict=True))


@dataclasses.dataclass(frozen=True)
class Swap:
    """What one swap did: the version it made and how long its two phases took.

    ``load_s``: loading the weights while the old ones kept serving (0 where the engine
    loads inside the pause); ``pause_s``: the time no request could start (with the
    ``finish`` policy, the wait for running requests included).
    """

    version: int
    load_s: float
    pause_s: float


@runtime_checkable
class WeightTarget(Protocol):
    """An engine that can swap its weights; its version rises by one per swap."""

    @property
    def policy_version(self) -> int: ...

    @property
    def in_flight_policy(self) -> InFlightPolicy: ...

    def manifest(self) -> Manifest: ...

    async def swap_weights(
        self, weights: StagedWeights | NcclWeights, ready: Awaitable[object] | None = None
    ) -> Swap:
        """Apply ``weights`` between engine steps (see ``in_flight_policy``), reset the
        prefix cache, and bump the version. ``ready`` (a check still running) is awaited
        after the load and before the pause: if it raises, nothing is swapped and its
        error is raised. On failure the old weights keep serving and the version does not
        move."""
        ...
