"""The CPU twin of the NCCL weight broadcast's wire: a gloo group with NCCL's two calls.

On GPU hosts the trainer broadcasts its weights to every server over NCCL: vLLM's
``NCCLTrainerWeightTransferEngine`` sends as rank 0 and each server's
``NCCLWeightTransferEngine`` receives (``engine.weight_transfer='nccl'``). NCCL needs CUDA,
so on CPU the same two engines run with this wire instead (``'gloo'``): the same rendezvous
(a TCP store that rank 0 hosts at ``master_address:master_port``, as vLLM's
``StatelessProcessGroup`` does), and a ``GlooGroup`` that offers what the engines call on
vLLM's ``PyNcclCommunicator``: ``broadcast(tensor, src)`` and ``destroy()``. Tensors go one
by one (NCCL's packed mode works on CUDA streams).

Rank 0 sends a tensor only once every peer has said it is there to receive it (a count
in the rendezvous store), so a peer that will never come (a server refused the update
before it began to receive) leaves no broadcast pending: ``given_up`` is asked while rank
0 waits and ends the wait with that reason, rather than the group's timeout, and the
group stays usable.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

ARRIVED = "receivers-arrived"  # the store's count of receivers ready, over all broadcasts
POLL_S = (5e-5, 0.02)  # a waiting broadcast asks ``given_up`` after 50 us, then ever less often


class GlooGroup:
    """One rank of a broadcast group over gloo (torch.distributed, no default group)."""

    def __init__(
        self, group: dist.ProcessGroupGloo, store: dist.Store, rank: int, timeout_s: float
    ) -> None:
        self._group: Any = group  # torch's stubs lack the Backend's collectives
        self._store = store  # rank 0 hosts it: it lives as long as the group
        self._rank = rank
        self._sent = 0  # broadcasts this rank took part in
        self.timeout_s = timeout_s
        self.given_up: Callable[[], BaseException | None] = lambda: None

    @classmethod
    def join(
        cls, address: str, port: int, *, rank: int, world_size: int, timeout_s: float = 300.0
    ) -> GlooGroup:
        """Meet the other ranks at ``address:port`` (rank 0 listens there); blocks until all
        ``world_size`` ranks joined, at most ``timeout_s``."""
        timeout = datetime.timedelta(seconds=timeout_s)
        store = dist.TCPStore(
            address, port, world_size, is_master=rank == 0, timeout=timeout, wait_for_workers=True
        )
        prefixed = dist.PrefixStore("rollgym-weights", store)
        group = dist.ProcessGroupGloo(prefixed, rank, world_size, timeout)
        return cls(group, prefixed, rank, timeout_s)

    def broadcast(self, tensor: torch.Tensor, src: int = 0, stream: object = None) -> None:
        """``tensor`` from rank 0 into every other rank's ``tensor`` (in place).
        ``stream``: NCCL's CUDA stream, meaningless here."""
        if src != 0:
            raise ValueError("the weight broadcast sends from rank 0 only")
        if self._group is None:
            raise RuntimeError("the weight broadcast group was destroyed: open a new one")
        self._sent += 1
        if self._rank == 0:
            self._wait_for_receivers(self._group.size() - 1)
        else:
            self._store.add(ARRIVED, 1)
        options = dist.BroadcastOptions()
        options.rootRank = 0
        self._group.broadcast([tensor], options).wait()

    def _wait_for_receivers(self, receivers: int) -> None:
        deadline = time.monotonic() + self.timeout_s
        pause, longest = POLL_S
        while self._store.add(ARRIVED, 0) < self._sent * receivers:
            reason = self.given_up()
            if reason is not None:
                self._sent -= 1  # nothing was sent: the next broadcast is this one again
                raise reason
            if time.monotonic() > deadline:
                self._sent -= 1
                raise TimeoutError(
                    f"the weight broadcast waited {self.timeout_s:g} s for its peers"
                )
            time.sleep(pause)
            pause = min(2 * pause, longest)

    def destroy(self) -> None:
        """Leave the group (its sockets close once nothing holds it)."""
        self._group = None
