"""Weight push: the trainer's parameters, as safetensors bytes, to ``POST /admin/weights``.

The upload carries ``X-Expected-Version: V``; the server applies the weights between engine
steps, bumps its version to ``V + 1`` and answers with it. The pusher checks that answer,
so the trainer knows which version its weights now have, and records how long the sync took.

Parameters are taken from ``named_parameters()``, which lists a tied tensor (embedding and
LM head) once, under the checkpoint name the server's loader expects.

A push whose answer never came (the server died or restarted, or answered 503) is
reconciled once the server is back: the server keeps its last applied weights and their
version across a restart, so if it is at ``V + 1`` the push landed and nothing is sent
again; otherwise (still ``V``, or a version the trainer did not expect) the weights are
pushed again, once, against the version the server is at.
"""

from __future__ import annotations

import dataclasses
import time

import torch
from safetensors.torch import save as safetensors_bytes

from rollgym.contract.wire import WeightUpdateResult
from rollgym.trainer.client import ServerClient
from rollgym.trainer.errors import ProtocolError, ServerReplyError, ServerUnavailable


def weights_bytes(model: torch.nn.Module) -> bytes:
    """The model's parameters as one safetensors blob (contiguous, on CPU, own dtype)."""
    tensors = {
        name: param.detach().to("cpu").contiguous() for name, param in model.named_parameters()
    }
    return safetensors_bytes(tensors)


@dataclasses.dataclass(frozen=True)
class WeightSync:
    """One completed push: the version the weights now have and what it cost."""

    policy_version: int
    bytes: int
    serialize_s: float
    sync_s: float  # upload, apply and answer: wall time
    server: WeightUpdateResult | None  # None: the answer was lost, the push landed anyway


class WeightPusher:
    """Pushes weights and tracks the version they get; one pusher per trainer."""

    def __init__(self, client: ServerClient, *, version: int) -> None:
        """``version``: the server's version before the first push (from ``/health``)."""
        self.client = client
        self.version = version
        self.history: list[WeightSync] = []

    def push(self, model: torch.nn.Module) -> WeightSync:
        """Upload ``model``'s weights; return once the server serves them as ``version + 1``."""
        t0 = time.perf_counter()
        data = weights_bytes(model)
        t1 = time.perf_counter()
        try:
            result: WeightUpdateResult | None = self.client.push_weights(
                data, expected_version=self.version
            )
        except (ServerUnavailable, ServerReplyError) as exc:
            if isinstance(exc, ServerReplyError) and exc.status != 503:
                raise
            result = self._reconcile(data)
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
            bytes=len(data),
            serialize_s=t1 - t0,
            sync_s=t2 - t1,
            server=result,
        )
        self.history.append(sync)
        return sync

    def _reconcile(self, data: bytes) -> WeightUpdateResult | None:
        """After a push without an answer (see the module docstring); None if it landed."""
        server = self.client.policy_version()  # waits for the server, up to reconnect_timeout_s
        if server == self.version + 1:
            return None
        self.version = server
        return self.client.push_weights(data, expected_version=server)
