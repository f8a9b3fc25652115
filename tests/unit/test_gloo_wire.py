"""The weight broadcast's gloo wire (rollgym.contract.gloo_wire) and the trainer's way of
starting two sides at once (trainer.broadcast.first_failure), on loopback threads.
The real twin: tests/engine/test_weight_broadcast.py (a real server's vLLM receiving)."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from rollgym.contract.gloo_wire import GlooGroup
from rollgym.run.server_process import free_port
from rollgym.trainer.broadcast import first_failure


def two_ranks() -> tuple[GlooGroup, GlooGroup]:
    port = free_port()

    def join(rank: int):
        return lambda: GlooGroup.join("127.0.0.1", port, rank=rank, world_size=2, timeout_s=30)

    sender, receiver = first_failure(join(0), join(1))
    return sender, receiver


def test_a_broadcast_lands_in_every_rank_in_place() -> None:
    sender, receiver = two_ranks()
    sent = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    received = torch.empty(3, 4)
    first_failure(lambda: sender.broadcast(sent, src=0), lambda: receiver.broadcast(received))
    assert torch.equal(received, sent)


def test_a_peer_that_will_never_come_ends_the_wait_with_its_reason_and_no_harm() -> None:
    sender, receiver = two_ranks()  # the receiver does not broadcast: it was refused
    refused = RuntimeError("409 version_mismatch")
    since = time.monotonic()
    sender.given_up = lambda: refused if time.monotonic() - since > 0.2 else None
    with pytest.raises(RuntimeError, match="version_mismatch"):
        sender.broadcast(torch.ones(4), src=0)
    assert time.monotonic() - since < 5  # the reason, not the group's 30 s timeout
    sender.given_up = lambda: None  # the next update is taken: the group still works
    received = torch.empty(4)
    first_failure(
        lambda: sender.broadcast(torch.full((4,), 2.0)), lambda: receiver.broadcast(received)
    )
    assert received.tolist() == [2.0] * 4


def test_starting_two_sides_at_once_fails_with_the_first_error_at_once() -> None:
    never = threading.Event()
    since = time.monotonic()

    def refuse() -> None:
        raise ValueError("not enabled")

    with pytest.raises(ValueError, match="not enabled"):
        first_failure(lambda: never.wait(60), refuse)
    assert time.monotonic() - since < 5
    assert first_failure(lambda: 1, lambda: "two") == [1, "two"]
