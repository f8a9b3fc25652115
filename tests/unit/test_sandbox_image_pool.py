"""``ImagePool``: warm boxes per kind, one cap, LRU eviction, demand, the same resets.

The boxes are fake (``HostProcessProvider``: the real executor as host processes); the
pool logic is the real one. Its real twin on Docker: ``bench.sandboxes --images`` and
tests/docker/test_harbor_docker.py.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from rollgym.sandboxes import metrics as m
from rollgym.sandboxes.base import PoolTimeout, SandboxError
from rollgym.sandboxes.config import ImagePoolConfig, PoolConfig, SandboxConfig
from rollgym.sandboxes.demand import Demand
from rollgym.sandboxes.fake import HostProcessProvider
from rollgym.sandboxes.image_pool import ImagePool
from rollgym.sandboxes.metrics import MetricsRecorder

pytestmark = pytest.mark.unit


def make_pool(recorder: MetricsRecorder | None = None, **settings) -> ImagePool:
    config = ImagePoolConfig(health_interval_s=0, **settings)
    return ImagePool(lambda pc: HostProcessProvider(pc.box), config, metrics=recorder)


def box(image: str, **changes) -> SandboxConfig:
    return SandboxConfig(image=image, **changes)


def test_a_released_box_comes_back_warm_and_reset() -> None:
    recorder = MetricsRecorder()
    with make_pool(recorder, max_boxes=2) as pool:
        kind = pool.for_box(box("a"))
        first = kind.acquire(timeout=10)
        first.run_shell("echo left-behind > note.txt")
        first_id = first.id
        kind.release(first)
        again = kind.acquire(timeout=10)
        assert again.id == first_id  # the warm box, not a new one
        assert again.run_shell("ls -A").stdout == ""  # and reset
        kind.release(again)
        (status,) = [k for k in pool.kinds() if k.image == "a"]
    assert (status.warm_hits, status.cold_starts) == (1, 1)
    snapshot = recorder.snapshot()
    assert snapshot[f"{m.WARM_HITS}{{image=a}}"] == 1
    assert snapshot[f"{m.COLD_STARTS}{{image=a}}"] == 1
    assert snapshot[f"{m.IMAGE_ACQUIRE}{{image=a,path=warm}}"].count == 1
    assert snapshot[f"{m.IMAGE_ACQUIRE}{{image=a,path=cold}}"].count == 1


def test_at_the_cap_the_least_recently_used_kind_is_evicted() -> None:
    recorder = MetricsRecorder()
    with make_pool(recorder, max_boxes=2) as pool:
        a, b, c = (pool.for_box(box(name)) for name in "abc")
        for kind in (a, b):  # a used first, then b
            kind.release(kind.acquire(timeout=10))
        c.release(c.acquire(timeout=10))  # no room: a's idle box goes
        images = {k.image: k for k in pool.kinds()}
        assert (images["a"].ready, images["b"].ready, images["c"].ready) == (0, 1, 1)
        assert pool.status().ready == 2  # never more than the cap
    assert recorder.snapshot()[f"{m.EVICTIONS}{{image=a,reason=lru}}"] == 1


def test_when_every_box_is_leased_an_acquire_waits_for_a_release() -> None:
    with make_pool(max_boxes=1) as pool:
        a, b = pool.for_box(box("a")), pool.for_box(box("b"))
        held = a.acquire(timeout=10)
        with pytest.raises(PoolTimeout, match="no sandbox of b"):
            b.acquire(timeout=0.3)
        a.release(held)  # its room goes to b now
        other = b.acquire(timeout=10)
        assert other.run_shell("echo ok").stdout == "ok\n"
        b.release(other)


def test_the_memory_cap_counts_each_box_limit() -> None:
    with make_pool(max_boxes=8, max_memory_mb=1024) as pool:
        big = pool.for_box(box("big", memory_mb=512))
        held = [big.acquire(timeout=10) for _ in range(2)]
        with pytest.raises(PoolTimeout):
            big.acquire(timeout=0.3)  # a third 512 MiB box does not fit in 1024
        for sandbox in held:
            big.release(sandbox)


def test_a_kind_that_cannot_start_fails_its_acquire_at_once() -> None:
    class NoImage(HostProcessProvider):
        def start_box(self):
            raise SandboxError("image not found: rollgym/task-env:0123")

    config = ImagePoolConfig(max_boxes=2, health_interval_s=0)
    with ImagePool(lambda pc: NoImage(pc.box), config) as pool:
        start = time.monotonic()
        with pytest.raises(SandboxError, match="image not found: rollgym/task-env:0123"):
            pool.for_box(box("missing")).acquire(timeout=30)
        assert time.monotonic() - start < 5  # not the 30 s of a timeout


def test_the_warm_count_follows_the_demand_of_the_window() -> None:
    recorder = MetricsRecorder()
    with make_pool(recorder, max_boxes=4, demand_window_s=0.5) as pool:
        kind = pool.for_box(box("a"))
        held = [kind.acquire(timeout=10) for _ in range(3)]
        for sandbox in held:
            kind.release(sandbox)
        pool.health_pass()  # within the window: the burst of 3 stays warm
        assert [k.ready for k in pool.kinds() if k.image == "a"] == [3]
        time.sleep(0.6)
        pool.health_pass()  # nobody asked in a whole window: the boxes go
        deadline = time.monotonic() + 10
        while pool.status().starting and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [k.ready for k in pool.kinds() if k.image == "a"] == [0]
    assert recorder.snapshot()[f"{m.EVICTIONS}{{image=a,reason=demand}}"] == 3


def test_the_default_kind_keeps_its_warm_boxes_and_serves_plain_acquires() -> None:
    with make_pool(max_boxes=3, warm_default=2) as pool:
        assert pool.status().ready == 2  # started with the pool
        with pool.sandbox(timeout=10) as sandbox:
            assert sandbox.run_shell("echo hi").stdout == "hi\n"
        other = pool.for_box(box("x"))
        other.release(other.acquire(timeout=10))  # a free slot: no eviction needed
        other2 = pool.for_box(box("y"))
        other2.release(other2.acquire(timeout=10))  # evicts x, never the default's floor
        default = pool.kinds()[0]
        assert default.ready == 2


async def test_async_acquires_wait_and_are_served_first_come_first_served() -> None:
    async with make_pool(max_boxes=1) as pool:
        a, b = pool.for_box(box("a")), pool.for_box(box("b"))
        held = await a.aacquire(timeout=10)
        waiting = asyncio.create_task(b.aacquire(timeout=10))
        await asyncio.sleep(0.1)
        assert not waiting.done()
        await a.arelease(held)
        served = await waiting
        assert (await served.arun_shell("echo b")).stdout == "b\n"
        await b.arelease(served)


def test_demand_is_the_peak_of_the_window() -> None:
    demand = Demand(window_s=10.0)
    assert demand.target(now=0.0) == 0
    demand.note(leased=4, now=1.0)
    demand.note(leased=0, now=2.0)
    assert demand.target(now=11.5) == 4  # 4 were leased during [1.5, 2)
    assert demand.target(now=12.5) == 0
    with pytest.raises(ValueError):
        Demand(window_s=0)


def test_the_config_refuses_what_cannot_fit() -> None:
    with pytest.raises(ValueError, match="do not fit"):
        ImagePoolConfig(max_boxes=2, warm_default=3)
    with pytest.raises(ValueError, match="cannot hold"):
        ImagePoolConfig(max_memory_mb=256)  # not even one default box of 512 MiB
    assert ImagePoolConfig().pool_config(box("a")) == PoolConfig(
        size=1, runtime_dir=ImagePoolConfig().runtime_dir, box=box("a")
    )


def test_the_server_makes_one_pool_of_many_images_when_max_boxes_is_set() -> None:
    from rollgym.sandboxes.docker import DockerImagePool, DockerSandboxPool
    from rollgym.sandboxes.metrics import NullMetrics
    from rollgym.server.app import _docker_pool
    from rollgym.server.config import SandboxSettings

    images = _docker_pool(SandboxSettings(pool_size=2, max_boxes=8), NullMetrics())
    assert isinstance(images, DockerImagePool)
    assert (images.config.max_boxes, images.config.warm_default) == (8, 2)
    assert isinstance(_docker_pool(SandboxSettings(pool_size=2), NullMetrics()), DockerSandboxPool)
    with pytest.raises(ValueError, match="do not fit in max_boxes"):
        SandboxSettings(pool_size=4, max_boxes=2)


class SlowProvider(HostProcessProvider):
    """Boxes that take longer to start than the pool waits for its warm-up."""

    def start_box(self):  # type: ignore[no-untyped-def]
        time.sleep(1.5)
        return super().start_box()


def test_a_warm_up_past_its_time_is_an_error_that_names_the_pool_state() -> None:
    config = ImagePoolConfig(
        health_interval_s=0, warm_default=1, box=SandboxConfig(start_timeout_s=0.2)
    )
    pool = ImagePool(lambda pc: SlowProvider(pc.box), config)
    started = time.monotonic()
    with pytest.raises(SandboxError, match="did not warm up in time"):
        pool.start()  # a status() under the pool's own lock used to hang here
    assert time.monotonic() - started < 10
    pool.close()
