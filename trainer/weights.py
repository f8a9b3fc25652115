"""Weight push: the trainer's parameters, as a safetensors file, to ``POST /admin/weights``.

(A LoRA run may push its adapter alone instead: ``trainer.lora.serve``, ``trainer.lora``.
With ``trainer.broadcast`` the same tensors are broadcast to the servers instead.)

The upload carries ``X-Expected-Version: V``; the server applies the weights between engine
steps, bumps its version to ``V + 1`` and answers with it. The pusher checks that answer,
so the trainer knows which version its weights now have, and records how long the sync took.

Parameters are taken from ``named_parameters()``, which lists a tied tensor (embedding and
LM head) once, under the checkpoint name the server's loader expects. The file is never
built in memory (``safetensors.torch.save`` copies the weights twice, 1.4-1.7 s for
SmolLM2's 538 MB here): ``SafetensorsBody`` writes its header and then sends each tensor's
own memory, in parts of ``PART_BYTES``.

A push whose answer never came (the server died or restarted, or answered 503) is
reconciled once the server is back: the server keeps its last applied weights and their
version across a restart, so if it is at ``V + 1`` the push landed and nothing is sent
again; otherwise (still ``V``, or a version the trainer did not expect) the weights are
pushed again, once, against the version the server is at.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import torch
from peft import PeftModel

from rollgym.contract.canary import CanaryProbes
from rollgym.contract.wire import WeightUpdateResult
from rollgym.trainer.canary import CanaryConfig, canary_probes
from rollgym.trainer.client import PART_BYTES, ServerClient
from rollgym.trainer.errors import ProtocolError, ServerReplyError, ServerUnavailable
from rollgym.trainer.lora import (
    MergedWeight,
    Weight,
    adapter_tensors,
    as_tensor,
    served_weights,
    zero_adapter,
)

if TYPE_CHECKING:
    from rollgym.trainer.broadcast import WeightBroadcaster

_CODES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.float8_e4m3fn: "F8_E4M3", torch.float8_e5m2: "F8_E5M2", torch.int64: "I64",
    torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL",
}  # fmt: skip


class SafetensorsBody:
    """Tensors as one safetensors file, sent from their own memory (little-endian hosts).

    ``len(body)`` is the file's size; iterating yields its header, then each tensor's bytes
    in parts of at most ``PART_BYTES``; iterate again to send it again (a retried push).

        >>> body = SafetensorsBody({"w": torch.ones(2, 2)})
        >>> from safetensors.torch import load
        >>> load(b"".join(body))["w"].tolist(), len(body) == len(b"".join(body))
        ([[1.0, 1.0], [1.0, 1.0]], True)
    """

    def __init__(self, tensors: Mapping[str, Weight], metadata: dict[str, str] | None = None):
        """``metadata``: the file's ``__metadata__`` (text to text), e.g. an adapter's shape.
        A ``MergedWeight`` is made only as its bytes are sent, and dropped after."""
        self._tensors: list[tuple[str, Weight]] = [
            (n, t if isinstance(t, MergedWeight) else _on_cpu(t)) for n, t in tensors.items()
        ]
        entries: dict[str, object] = {"__metadata__": metadata} if metadata else {}
        offset = 0
        for name, tensor in self._tensors:
            size = math.prod(tensor.shape) * tensor.dtype.itemsize
            entries[name] = {
                "dtype": _CODES[tensor.dtype],
                "shape": list(tensor.shape),
                "data_offsets": [offset, offset + size],
            }
            offset += size
        header = json.dumps(entries, separators=(",", ":")).encode()
        header += b" " * (-len(header) % 8)  # the data starts 8-aligned, as safetensors writes it
        self._header = len(header).to_bytes(8, "little") + header
        self._size = len(self._header) + offset

    @classmethod
    def of(cls, model: torch.nn.Module) -> SafetensorsBody:
        """The weights the server serves for ``model`` (``trainer.lora.served_weights``)."""
        return cls(served_weights(model))

    def __len__(self) -> int:
        return self._size

    @property
    def tensors(self) -> list[tuple[str, torch.Tensor]]:
        """The file's tensors, by name, in order, all made at once (what a broadcast sends
        instead)."""
        return [(name, _on_cpu(as_tensor(weight))) for name, weight in self._tensors]

    def __iter__(self) -> Iterator[bytes | memoryview]:
        yield self._header
        for _, weight in self._tensors:
            tensor = _on_cpu(as_tensor(weight))  # a merged weight lives until its last part
            if tensor.numel() == 0:
                continue
            data = tensor.reshape(-1).view(torch.uint8).numpy().data
            for start in range(0, len(data), PART_BYTES):
                yield data[start : start + PART_BYTES]


def _on_cpu(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``'s values on the CPU, contiguous: ``tensor`` itself where it is so already."""
    return (tensor.detach() if tensor.requires_grad else tensor).to("cpu").contiguous()


def _snapshot(weight: Weight, trainable: set[int]) -> Weight:
    """``weight`` as it is now, kept so while training changes the model's."""
    if isinstance(weight, MergedWeight):
        return weight.tensor()
    return weight.detach().clone() if weight.data_ptr() in trainable else weight


@dataclasses.dataclass(frozen=True)
class PreparedPush:
    """A push ready to send: the weights' body, the canary's probes, the time to make them."""

    body: SafetensorsBody
    probes: CanaryProbes | None
    prepare_s: float


@dataclasses.dataclass(frozen=True)
class WeightSync:
    """One completed push: the version the weights now have and what it cost."""

    policy_version: int
    bytes: int
    serialize_s: float  # the body's header, the canary's probes (and a snapshot's copies)
    sync_s: float  # upload, apply and answer: wall time
    server: WeightUpdateResult | None  # None: the answer was lost, the push landed anyway


class WeightPusher:
    """Pushes weights and tracks the version they get; one pusher per trainer."""

    def __init__(
        self,
        client: ServerClient,
        *,
        version: int,
        canary: CanaryConfig | None = None,
        adapters: bool = False,
        broadcast: WeightBroadcaster | None = None,
    ) -> None:
        """``version``: the server's version before the first push (from ``/health``);
        ``canary``: send probes with every push (``trainer.canary``); ``adapters``: send
        a LoRA model's adapter alone (``trainer.lora.serve='adapter'``), not merged weights;
        ``broadcast``: send pushes over it rather than uploading them
        (``trainer.broadcast``)."""
        self.client = client
        self.version = version
        self.canary = canary
        self.adapters = adapters
        self.broadcast = broadcast
        self.history: list[WeightSync] = []

    def push(self, model: torch.nn.Module) -> WeightSync:
        """Upload ``model``'s weights; return once the server serves them as ``version + 1``."""
        return self.send(self.prepare(model))

    def prepare(self, model: torch.nn.Module, *, snapshot: bool = False) -> PreparedPush:
        """What a push of ``model``'s weights sends: the body and the canary's probes.
        ``snapshot``: copy the tensors training may still change, so the push can be sent
        while the next step runs (``trainer.background_push``)."""
        t0 = time.perf_counter()
        metadata = None
        tensors: Mapping[str, Weight]
        if self.adapters:
            if not isinstance(model, PeftModel):
                raise TypeError("pushing adapters needs a LoRA model (trainer.lora)")
            tensors, metadata = adapter_tensors(model)
        else:
            tensors = served_weights(model)
        if snapshot:  # made now: the weights train on while this is sent
            trainable = {p.data_ptr() for p in model.parameters() if p.requires_grad}
            tensors = {name: _snapshot(t, trainable) for name, t in tensors.items()}
        body = SafetensorsBody(tensors, metadata)
        probes = canary_probes(model, self.canary) if self.canary is not None else None
        return PreparedPush(body, probes, prepare_s=time.perf_counter() - t0)

    def send(self, push: PreparedPush) -> WeightSync:
        """Upload a prepared push; return once the server serves it as ``version + 1``."""
        t1 = time.perf_counter()
        try:
            result = self._deliver(push)
        except (ServerUnavailable, ServerReplyError) as exc:
            if self.broadcast is not None:  # a server that restarted has left the group
                raise
            if isinstance(exc, ServerReplyError) and exc.status != 503:
                raise
            result = self._reconcile(push.body, push.probes)
        t2 = time.perf_counter()
        version = self.version + 1 if result is None else result.policy_version
        if version != self.version + 1:
            raise ProtocolError(
                f"pushed at version {self.version}, server answered version "
                f"{version} (expected {self.version + 1})"
            )
        self.version = version
        sync = WeightSync(
            policy_version=version,
            bytes=len(push.body),
            serialize_s=push.prepare_s,
            sync_s=t2 - t1,
            server=result,
        )
        self.history.append(sync)
        return sync

    def _deliver(self, push: PreparedPush) -> WeightUpdateResult | None:
        if self.broadcast is not None:
            return self.broadcast.send(
                push.body.tensors, expected_version=self.version, canary=push.probes
            )
        return self.client.push_weights(
            push.body, expected_version=self.version, canary=push.probes
        )

    @classmethod
    def push_policy(
        cls, client: ServerClient, model: torch.nn.Module, *, retry: bool = True
    ) -> WeightSync:
        """Push ``model`` (a whole model, or a LoRA model) as ``client``'s server takes it:
        merged whole weights, or, to a server that serves adapters, the adapter (a whole
        model as an adapter that adds nothing: ``trainer.lora.zero_adapter``); ``retry``:
        wait for a server that does not answer yet (``ServerClient``)."""
        info = client.policy(retry=retry)
        adapters = info.lora_max_rank is not None
        if adapters and not isinstance(model, PeftModel):
            model = zero_adapter(model)
        return cls(client, version=info.policy_version, adapters=adapters).push(model)

    def _reconcile(
        self, body: SafetensorsBody, probes: CanaryProbes | None
    ) -> WeightUpdateResult | None:
        """After a push without an answer (see the module docstring); None if it landed."""
        server = self.client.policy_version()  # waits for the server, up to reconnect_timeout_s
        if server == self.version + 1:
            return None
        self.version = server
        return self.client.push_weights(body, expected_version=server, canary=probes)
