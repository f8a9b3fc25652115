"""Weights broadcast to the servers: the trainer as rank 0 of vLLM's weight transfer.

With ``trainer.broadcast`` a push is not uploaded: the trainer and every server form one
collective group once (``POST /admin/weights/nccl/init``: each server's workers join it),
and each push is announced (``POST /admin/weights/nccl``: names, dtypes and shapes, the
expected version, the canary's probes) while the trainer broadcasts the tensors; the
server receives them between engine steps, bumps its version and answers as for an upload.

The sending engine is vLLM's ``NCCLTrainerWeightTransferEngine`` (GPU hosts), which drives
the round trip through ``VLLMWeightSyncClient``'s four calls; ``RollgymServers`` is that
client over rollgym's admin routes (or the router's, which fans them out: one rank per
server). On CPU its twin ``GlooTrainerWeightTransferEngine`` keeps vLLM's round trip
(``send_weights``: the announcement concurrent with the broadcast, each tensor checked
against what was announced) and changes the wire to gloo (``rollgym.contract.gloo_wire``),
which the servers' ``engine.weight_transfer='gloo'`` receives.

A server that refuses an update (a version it is not at, tensors its model lacks) never
joins the broadcast: the gloo wire ends the send with the server's reason. vLLM's NCCL
sender has no such exit; its broadcast waits for NCCL's own timeout.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_EXCEPTION, Future, wait
from typing import Any, Self

import torch
from vllm.distributed.weight_transfer.base import ParamMeta, VLLMWeightSyncClient, WeightSource
from vllm.distributed.weight_transfer.nccl_engine import (
    NCCLTrainerInitInfo,
    NCCLTrainerWeightTransferEngine,
)

from rollgym.contract.canary import CanaryProbes
from rollgym.contract.gloo_wire import GlooGroup
from rollgym.contract.wire import NcclInit, NcclUpdate, WeightUpdateResult
from rollgym.trainer.client import ServerClient
from rollgym.trainer.config import BroadcastConfig


class PushSource(WeightSource):
    """vLLM's view of the push being sent: its tensors, in order (set before each send)."""

    def __init__(self) -> None:
        self.tensors: list[tuple[str, torch.Tensor]] = []

    def metadata(self) -> list[ParamMeta]:
        return [ParamMeta(name, t.dtype, tuple(t.shape)) for name, t in self.tensors]

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        return iter(self.tensors)


class RollgymServers:
    """vLLM's ``VLLMWeightSyncClient`` over rollgym's admin routes.

    The server pauses, receives, applies and bumps its version inside one call
    (``update_weights``), so ``start_weight_update`` and ``finish_weight_update`` have
    nothing to do. ``expect`` sets what the next update carries; ``result`` is its answer.
    """

    def __init__(self, client: ServerClient, timeout_s: float) -> None:
        self._client = client
        self._timeout_s = timeout_s
        self._expected_version: int | None = None
        self._canary: CanaryProbes | None = None
        self.result: WeightUpdateResult | None = None
        self.refused: BaseException | None = None  # the last update's error, if it failed

    def expect(self, version: int, canary: CanaryProbes | None) -> None:
        self._expected_version, self._canary = version, canary
        self.result = self.refused = None

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        fields = {k: init_info[k] for k in NcclInit.model_fields if k in init_info}
        self._client.join_broadcast(NcclInit(**fields), timeout_s=self._timeout_s)

    def start_weight_update(self) -> None:
        pass

    def update_weights(self, update_info: dict[str, Any] | list[dict[str, Any]]) -> None:
        if not isinstance(update_info, dict):
            raise TypeError("one update for every server: rollgym's router fans it out")
        update = NcclUpdate(**update_info, expected_version=self._expected_version)
        try:
            self.result = self._client.receive_broadcast(
                update, canary=self._canary, timeout_s=self._timeout_s
            )
        except BaseException as exc:
            self.refused = exc
            raise

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        pass


class GlooTrainerWeightTransferEngine(NCCLTrainerWeightTransferEngine):
    """vLLM's NCCL sender with gloo on the wire: tensors one by one, no CUDA."""

    @classmethod
    def trainer_init(
        cls,
        init_info: NCCLTrainerInitInfo,
        *,
        client: VLLMWeightSyncClient,
        source: WeightSource | None = None,
        timeout_s: float = 300.0,
    ) -> Self:
        """Open rank 0 while the servers join; a server's refusal ends the wait at once."""
        if source is None:
            raise ValueError("the broadcast needs a WeightSource: the tensors it sends")
        engine = cls(client=client, source=source, packed=False)
        workers = {
            "master_address": init_info.master_address,
            "master_port": init_info.master_port,
            "rank_offset": 1,
            "world_size": init_info.world_size,
            "packed": False,
        }
        group, _ = first_failure(
            lambda: GlooGroup.join(
                init_info.master_address,
                init_info.master_port,
                rank=0,
                world_size=init_info.world_size,
                timeout_s=timeout_s,
            ),
            lambda: client.init_weight_transfer_engine(workers),
        )
        if isinstance(client, RollgymServers):
            group.given_up = lambda: client.refused
        engine.model_update_group = group
        return engine

    def _broadcast(self, source: WeightSource, meta: list[ParamMeta]) -> None:
        group = self.model_update_group
        assert group is not None, "trainer_init() opens the group"
        for _name, tensor in self._checked_iter(source, meta):
            group.broadcast(tensor.contiguous(), src=0)


class WeightBroadcaster:
    """Sends pushes by broadcast over one group with every server, opened by ``open``."""

    def __init__(
        self, servers: RollgymServers, source: PushSource, engine: NCCLTrainerWeightTransferEngine
    ) -> None:
        self._servers = servers
        self._source = source
        self._engine = engine

    @classmethod
    def open(cls, client: ServerClient, config: BroadcastConfig) -> WeightBroadcaster:
        """Form the group with ``config.servers`` servers behind ``client``'s URL."""
        servers = RollgymServers(client, config.timeout_s)
        source = PushSource()
        init = NCCLTrainerInitInfo(
            master_address=config.address,
            master_port=config.port,
            world_size=config.servers + 1,
            packed=config.backend == "nccl",
            rank=0,
        )
        if config.backend == "gloo":
            engine: NCCLTrainerWeightTransferEngine = GlooTrainerWeightTransferEngine.trainer_init(
                init, client=servers, source=source, timeout_s=config.timeout_s
            )
        else:
            engine = NCCLTrainerWeightTransferEngine.trainer_init(
                init, client=servers, source=source
            )
        return cls(servers, source, engine)

    def send(
        self,
        tensors: list[tuple[str, torch.Tensor]],
        *,
        expected_version: int,
        canary: CanaryProbes | None,
    ) -> WeightUpdateResult:
        """Broadcast ``tensors``; the server's answer once it serves them."""
        self._source.tensors = tensors
        self._servers.expect(expected_version, canary)
        self._engine.send_weights()
        assert self._servers.result is not None  # send_weights raised otherwise
        return self._servers.result

    def close(self) -> None:
        self._engine.shutdown()


def first_failure(*calls: Callable[[], Any]) -> list[Any]:
    """Run ``calls`` at once, each in a daemon thread; their results, or the first error
    as soon as one fails (the others are left to end on their own timeouts)."""
    futures: list[Future[Any]] = [Future() for _ in calls]

    def run(call: Callable[[], Any], future: Future[Any]) -> None:
        try:
            future.set_result(call())
        except BaseException as exc:
            future.set_exception(exc)

    for call, future in zip(calls, futures, strict=True):
        threading.Thread(target=run, args=(call, future), daemon=True).start()
    done, _ = wait(futures, return_when=FIRST_EXCEPTION)
    for future in done:
        if future.exception() is not None:
            raise future.exception()  # type: ignore[misc]
    return [f.result() for f in futures]
