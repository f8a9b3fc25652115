"""The receiving side of the weight broadcast on CPU: vLLM's NCCL engine with gloo on the wire.

``engine.weight_transfer='gloo'`` makes vLLM build this engine (registered under ``gloo``
with vLLM's ``WeightTransferEngineFactory``) where ``'nccl'`` builds
``NCCLWeightTransferEngine``. Everything but the wire is vLLM's: the worker's
``init_weight_transfer_engine`` / ``start_weight_update`` / ``update_weights`` /
``finish_weight_update`` and the layerwise reload around ``model.load_weights``. So the
routes, the pause and the version bump that serve an NCCL update on a GPU host are the ones
the gloo twin tests on CPU (``rollgym.contract.gloo_wire`` says what the wire is).

Runs inside the engine process. vLLM registers it there itself: ``register`` is a vLLM
plugin (pyproject's ``vllm.general_plugins`` entry point), which vLLM loads in every
process it starts, before a worker builds its weight transfer engine.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory
from vllm.distributed.weight_transfer.nccl_common import NCCLWeightTransferInitInfo
from vllm.distributed.weight_transfer.nccl_engine import (
    NCCLWeightTransferEngine,
    NCCLWeightTransferUpdateInfo,
)

from rollgym.contract.gloo_wire import GlooGroup

BACKEND = "gloo"


class GlooWeightTransferEngine(NCCLWeightTransferEngine):
    """Joins the trainer's gloo group at init; receives each tensor and loads it."""

    def init_transfer_engine(self, init_info: NCCLWeightTransferInitInfo) -> None:
        if init_info.packed:
            raise ValueError("the gloo weight broadcast sends tensors one by one: packed=false")
        if init_info.master_address is None or init_info.master_port is None:
            raise ValueError("the gloo weight broadcast meets at master_address:master_port")
        parallel = self.parallel_config  # this worker's rank among all servers' workers
        worker = parallel.data_parallel_index * parallel.world_size + parallel.rank
        self.packed = False
        self.model_update_group = GlooGroup.join(  # type: ignore[assignment]
            init_info.master_address,
            init_info.master_port,
            rank=init_info.rank_offset + worker,
            world_size=init_info.world_size,
        )

    def receive_weights(self, update_info: NCCLWeightTransferUpdateInfo) -> None:
        group = self.model_update_group
        if group is None:
            raise RuntimeError("no weight broadcast group: init_weight_transfer_engine first")
        model: Any = self.model  # a vLLM model: it has load_weights
        announced = zip(update_info.names, update_info.dtype_names, update_info.shapes, strict=True)
        for name, dtype_name, shape in announced:
            weight = torch.empty(shape, dtype=getattr(torch, dtype_name), device=self.device)
            group.broadcast(weight, src=0)
            model.load_weights([(name, weight)])


def register() -> None:
    """Make ``gloo`` a backend vLLM's workers can build (vLLM calls it: see above)."""
    with contextlib.suppress(ValueError):  # registered already: imported before
        WeightTransferEngineFactory.register_engine(BACKEND, GlooWeightTransferEngine)
