"""The fake sandbox and fake pool: the executor as a host process, the real pool logic."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from rollgym.sandboxes.base import (
    PoolTimeout,
    Sandbox,
    SandboxDied,
    SandboxFileError,
    SandboxPool,
    SandboxState,
    SandboxStateError,
    SandboxTimeout,
)
from rollgym.sandboxes.config import PoolConfig, SandboxConfig
from rollgym.sandboxes.fake import FakeSandbox, FakeSandboxPool
from rollgym.sandboxes.metrics import MetricsRecorder


@pytest.fixture
def box():
    # A generous SIGINT grace: on a loaded machine a timed-out call keeps its namespace.
    with FakeSandbox(SandboxConfig(output_limit_bytes=1000, python_grace_s=5)) as sandbox:
        yield sandbox


def test_implements_the_protocols(box) -> None:
    assert isinstance(box, Sandbox)
    pool = FakeSandboxPool()
    assert isinstance(pool, SandboxPool)
    pool.close()


def test_shell_reports_output_exit_code_and_starts_in_work_dir(box) -> None:
    result = box.run_shell('echo out; echo err >&2; test "$PWD" = "$HOME" && exit 3')
    assert (result.stdout, result.stderr, result.exit_code) == ("out\n", "err\n", 3)
    assert not result.ok and not result.truncated
    assert 0 < result.duration_s <= result.round_trip_s


def test_python_namespace_persists_and_shows_the_last_expression(box) -> None:
    assert box.run_python("x = 20").stdout == ""
    assert box.run_python("x * 2 + 2").stdout == "42\n"
    assert box.run_python("print('a'); _ + 1").stdout == "a\n43\n"
    failed = box.run_python("1 / 0")
    assert failed.exit_code == 1 and "ZeroDivisionError" in failed.stderr
    assert box.run_python("raise SystemExit(4)").exit_code == 4
    assert box.run_python("x").stdout == "20\n"


def test_files_map_box_paths_onto_the_private_folder(box) -> None:
    box.write_file("/work/sub/a.txt", "hello")
    box.write_file("/tmp/b.bin", b"\x00\xff")
    assert box.read_file("sub/a.txt") == b"hello"
    assert box.read_file("/tmp/b.bin") == b"\x00\xff"
    assert box.run_shell("cat sub/a.txt; ls $TMPDIR").stdout == "hellob.bin\n"
    assert (box.work_dir / "sub" / "a.txt").read_text() == "hello"
    with pytest.raises(SandboxFileError, match="only maps"):
        box.write_file("/etc/evil", "x")
    with pytest.raises(SandboxFileError, match="only maps"):
        box.read_file("../../etc/passwd")
    with pytest.raises(SandboxFileError):
        box.read_file("missing.txt")


def alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def gone(pid: int, within_s: float = 10.0) -> bool:
    """Whether ``pid`` is gone within ``within_s``: a SIGKILLed process still runs until the
    kernel schedules its exit, which a loaded machine (the whole suite) delays."""
    deadline = time.monotonic() + within_s
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_timeout_kills_the_group_and_the_box_stays_usable(box) -> None:
    with pytest.raises(SandboxTimeout) as caught:  # the fake's processes are the host's:
        box.run_shell("echo started; sleep 31 & echo $! > bg; sleep 31", timeout=1.5)
    assert caught.value.result is not None and caught.value.result.stdout == "started\n"
    assert gone(int((box.work_dir / "bg").read_text()))  # by pid, not a host-wide pgrep
    box.run_python("kept = 1")
    with pytest.raises(SandboxTimeout):
        box.run_python("while True: pass", timeout=0.3)
    assert box.run_python("kept").stdout == "1\n"
    assert box.state is SandboxState.READY and box.timeouts == 2


def test_output_is_capped_and_marked_truncated(box) -> None:
    result = box.run_shell("head -c 5000 /dev/zero | tr '\\0' a")
    assert result.truncated and result.stdout == "a" * 1000
    assert box.run_python("print('b' * 5000)").truncated


def test_reset_wipes_files_processes_and_namespace(box) -> None:
    box.write_file("/work/.hidden", "x")
    box.write_file("/tmp/t", "x")
    stray = int(box.run_shell("sleep 300 >/dev/null 2>&1 & echo $!").stdout)
    box.run_python("secret = 1")
    box.reset()
    assert list(box.work_dir.iterdir()) == [] and list(box.tmp_dir.iterdir()) == []
    assert gone(stray)
    assert "NameError" in box.run_python("secret").stderr


def test_a_python_call_that_ends_its_process_resets_the_namespace(box) -> None:
    box.run_python("gone = 1")
    result = box.run_python("import os; print('bye', flush=True); os._exit(3)")
    assert result.exit_code == 3 and result.stdout == "bye\n"
    assert "namespace was reset" in result.stderr
    assert "NameError" in box.run_python("gone").stderr
    assert box.state is SandboxState.READY


def test_a_python_call_that_ignores_sigint_is_killed() -> None:
    with FakeSandbox(SandboxConfig(python_grace_s=0.5)) as box:
        box.run_python("import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); lost = 1")
        with pytest.raises(SandboxTimeout) as caught:
            box.run_python("print('spinning', flush=True)\nwhile True: pass", timeout=1.5)
        assert caught.value.result is not None
        assert caught.value.result.stdout == "spinning\n"
        assert "namespace was reset" in caught.value.result.stderr
        assert "NameError" in box.run_python("lost").stderr


def test_python_output_keeps_its_order_with_child_processes(box) -> None:
    result = box.run_python("import os, sys\nprint('a')\nos.system('echo b')\nprint('c')")
    assert result.stdout == "a\nb\nc\n"


@pytest.mark.parametrize("call", ["run_shell", "run_python"])
def test_a_killed_box_raises_died(box, call: str) -> None:
    box.kill()
    with pytest.raises(SandboxDied):
        getattr(box, call)("1")
    assert box.state is SandboxState.DEAD
    with pytest.raises(SandboxDied, match="died earlier"):
        box.run_python("1")


async def test_async_calls_do_not_block_the_loop(box) -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    result = await box.arun_shell("sleep 0.3; echo done")
    task.cancel()
    assert result.stdout == "done\n"
    assert ticks >= 10  # the loop kept running while the command slept
    await box.awrite_file("f", "x")
    assert await box.aread_file("/work/f") == b"x"
    assert (await box.arun_python("2 ** 10")).stdout == "1024\n"
    await box.areset()
    assert (await box.arun_shell("ls")).stdout == ""


def test_async_calls_work_on_uvloop_as_under_uvicorn(box) -> None:
    import uvloop

    async def calls() -> list[str]:
        results = await asyncio.gather(box.arun_python("1 + 1"), box.arun_shell("echo hi"))
        return [r.stdout for r in results]

    assert uvloop.run(calls()) == ["2\n", "hi\n"]
    assert uvloop.run(calls()) == ["2\n", "hi\n"]  # a second loop reconnects


def test_pool_hands_out_reset_boxes_and_refuses_stale_handles() -> None:
    metrics = MetricsRecorder()
    with FakeSandboxPool(PoolConfig(size=1, health_interval_s=0), metrics=metrics) as pool:
        with pool.sandbox() as first:
            first.write_file("note", "x")
            first.run_python("y = 1")
        with pytest.raises(SandboxStateError, match="released"):
            first.run_shell("echo")
        with pool.sandbox() as second:
            assert second.id == first.id
            assert second.run_shell("ls").stdout == ""
            assert "NameError" in second.run_python("y").stderr
            with pytest.raises(PoolTimeout):
                pool.acquire(timeout=0.1)
    snapshot = metrics.snapshot()
    assert snapshot["sandbox_reset_seconds"].count == 2
    assert snapshot["sandbox_pool_wait_seconds"].count == 2


def test_pool_replaces_a_dead_box_and_recycles_after_a_timeout() -> None:
    with FakeSandboxPool(PoolConfig(size=1, health_interval_s=0)) as pool:
        with pool.sandbox() as lease:
            dead_id = lease.id
            lease._live().kill()
        with pool.sandbox(timeout=30) as lease:
            assert lease.id != dead_id
            timed_out_id = lease.id
            with pytest.raises(SandboxTimeout):
                lease.run_shell("sleep 5", timeout=0.1)
        with pool.sandbox(timeout=30) as lease:
            assert lease.id != timed_out_id
            assert lease.run_shell("echo ok").stdout == "ok\n"


async def test_async_waiters_are_served_in_turn() -> None:
    async with FakeSandboxPool(PoolConfig(size=2, health_interval_s=0)) as pool:

        async def episode(i: int) -> str:
            async with pool.asandbox(timeout=30) as sandbox:
                return (await sandbox.arun_python(f"{i} * 2")).stdout

        results = await asyncio.gather(*(episode(i) for i in range(6)))
        assert results == [f"{i * 2}\n" for i in range(6)]
        assert pool.status().ready == 2
        lease = await pool.aacquire()
        lease2 = await pool.aacquire()
        with pytest.raises(PoolTimeout):
            await pool.aacquire(timeout=0.1)
        await pool.arelease(lease)
        await pool.arelease(lease2)


def test_close_fails_waiters_and_stops_every_box() -> None:
    pool = FakeSandboxPool(PoolConfig(size=1, health_interval_s=0))
    pool.start()
    lease = pool.acquire()
    box_root = lease._live().root
    pool.close()
    assert not box_root.exists()
    with pytest.raises(SandboxStateError):
        pool.acquire()
    pool.release(lease)  # a late release after close is harmless


def test_sweep_removes_folders_of_dead_owners(tmp_path, monkeypatch) -> None:
    import tempfile

    from rollgym.sandboxes.fake import HostProcessProvider

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = tmp_path / "rollgym-fake-999999999-abc"
    alive = tmp_path / f"rollgym-fake-{os.getpid()}-abc"
    dead.mkdir()
    alive.mkdir()
    assert HostProcessProvider(SandboxConfig()).sweep() == 1
    assert not dead.exists() and alive.exists()


def test_acquire_wait_is_bounded_by_its_timeout() -> None:
    with FakeSandboxPool(PoolConfig(size=1, health_interval_s=0)) as pool:
        lease = pool.acquire()
        with pytest.raises(PoolTimeout, match=r"within 0\.2 s"):
            pool.acquire(timeout=0.2)
        pool.release(lease)


async def test_a_cancelled_waiter_does_not_lose_the_box() -> None:
    async with FakeSandboxPool(PoolConfig(size=1, health_interval_s=0)) as pool:
        held = await pool.aacquire()
        waiter = asyncio.create_task(pool.aacquire(timeout=30))
        await asyncio.sleep(0.05)
        assert pool.status().waiting == 1
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await pool.arelease(held)
        assert pool.status() == pool.status().__class__(
            size=1, ready=1, leased=0, starting=0, waiting=0
        )
        async with pool.asandbox(timeout=1) as again:
            assert again.id == held.id


def test_threads_share_a_small_pool_fairly() -> None:
    from concurrent.futures import ThreadPoolExecutor

    with FakeSandboxPool(PoolConfig(size=2, health_interval_s=0)) as pool:

        def episode(i: int) -> str:
            with pool.sandbox(timeout=60) as sandbox:
                sandbox.write_file("n", str(i))
                return sandbox.run_shell("cat n").stdout

        with ThreadPoolExecutor(6) as threads:
            assert list(threads.map(episode, range(12))) == [str(i) for i in range(12)]


class _BrokenProvider:
    def open(self) -> None:
        pass

    def start_box(self):
        from rollgym.sandboxes.base import SandboxError

        raise SandboxError("image not found")

    def stop_box(self, box) -> None:
        pass

    def sweep(self) -> int:
        return 0

    def close(self) -> None:
        self.closed = True


def test_a_pool_whose_boxes_cannot_start_fails_loudly_and_cleans_up() -> None:
    from rollgym.sandboxes.base import SandboxError
    from rollgym.sandboxes.pool import WarmPool

    provider = _BrokenProvider()
    pool = WarmPool(provider, PoolConfig(size=2, health_interval_s=0))
    with pytest.raises(SandboxError, match="image not found"):
        pool.start()
    assert provider.closed


def test_back_to_back_resets_never_hang_on_a_worker_just_forked() -> None:
    # A worker killed before it leads its own process group must still die: with the bug
    # this guards against, a reset waited for it forever (here: SandboxDied after 2 s).
    with FakeSandbox(SandboxConfig(reset_timeout_s=1.0, host_grace_s=1.0)) as sandbox:
        for _ in range(30):
            sandbox.reset()
        assert sandbox.run_python("1 + 1").stdout == "2\n"
