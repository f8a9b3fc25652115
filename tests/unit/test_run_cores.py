"""Pinning: every thread of a process moves (not only the caller, as ``sched_setaffinity(0)``
does), and ``CpuSplit(pinned=True)`` gives trainer and server cores of their own."""

from __future__ import annotations

import os
import threading

import pytest
from pydantic import ValidationError

from rollgym.run.cores import allowed_cores, pin_process
from rollgym.run.pipeline import CpuSplit


def _thread_cores(tid: int) -> set[int]:
    return os.sched_getaffinity(tid)


@pytest.fixture
def restored_affinity():
    before = allowed_cores()
    yield before
    pin_process(before)


def test_pinning_moves_every_thread_of_the_process(restored_affinity) -> None:
    one = {min(restored_affinity)}
    started, stop = threading.Event(), threading.Event()
    tids: list[int] = []

    def worker() -> None:
        tids.append(threading.get_native_id())
        started.set()
        stop.wait()

    thread = threading.Thread(target=worker)
    thread.start()
    started.wait()
    try:
        pin_process(one)
        assert _thread_cores(tids[0]) == one  # a thread that was already running
        assert _thread_cores(threading.get_native_id()) == one
    finally:
        stop.set()
        thread.join()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_a_pinned_split_gives_each_its_own_cores() -> None:
    cores = CpuSplit(trainer=1, server=1, pinned=True).cores()
    assert cores is not None
    trainer, server = cores
    assert len(trainer) == len(server) == 1
    assert not trainer & server
    assert (trainer | server) <= allowed_cores()
    assert CpuSplit().cores() is None


def test_a_pinned_split_needs_the_cores_it_names() -> None:
    with pytest.raises(ValidationError, match="pinned needs trainer"):
        CpuSplit(trainer=len(allowed_cores()), server=1, pinned=True)
