"""DockerSandboxPool on the real engine: calls, hardening, limits, faults, reset, cleanup."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from rollgym.sandboxes.base import (
    SandboxDied,
    SandboxOOM,
    SandboxState,
    SandboxTimeout,
)
from rollgym.sandboxes.config import PoolConfig, SandboxConfig
from rollgym.sandboxes.docker import DockerSandboxPool
from rollgym.sandboxes.docker.provider import LABEL_POOL

QUIET = {"health_interval_s": 0}


def pool_containers(docker_client, pool_id: str) -> list:
    filters = {"label": f"{LABEL_POOL}={pool_id}"}
    return docker_client.containers.list(all=True, filters=filters, sparse=True)


def wait_until(condition, timeout: float = 60.0) -> None:
    """Poll ``condition`` (a background event, not a timing under test)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def pool():
    # A generous SIGINT grace: on a loaded machine a timed-out call keeps its namespace.
    config = PoolConfig(size=2, box=SandboxConfig(pids_limit=64, python_grace_s=2), **QUIET)
    with DockerSandboxPool(config) as pool:
        yield pool


def test_shell_python_and_files(pool) -> None:
    with pool.sandbox() as box:
        result = box.run_shell("echo out; echo err >&2; id -u; pwd; exit 5")
        assert (result.stdout, result.stderr, result.exit_code) == (
            "out\n61000\n/work\n",
            "err\n",
            5,
        )
        box.write_file("/work/src/main.py", "print(6 * 7)\n")
        assert box.run_shell("python3 src/main.py").stdout == "42\n"
        assert box.run_python("n = 6").ok
        assert box.run_python("import os; n * 7, os.getcwd()").stdout == "(42, '/work')\n"
        box.write_file("/tmp/blob", bytes(range(256)))
        assert box.read_file("/tmp/blob") == bytes(range(256))


async def test_async_calls_run_side_by_side(pool) -> None:
    async def episode(i: int) -> str:
        async with pool.asandbox(timeout=30) as box:
            await box.awrite_file("i.txt", str(i))
            result = await box.arun_shell("sleep 0.5; cat i.txt")
            assert (await box.arun_python("2 + 2")).stdout == "4\n"
            return result.stdout

    assert await asyncio.gather(episode(1), episode(2)) == ["1", "2"]


def test_hardening_non_root_no_caps_no_new_privileges(pool) -> None:
    with pool.sandbox() as box:
        status = box.run_shell("grep -E '^(Uid|CapEff|CapPrm|NoNewPrivs)' /proc/self/status").stdout
        assert "Uid:\t61000\t61000\t61000\t61000" in status
        assert "CapEff:\t0000000000000000" in status and "CapPrm:\t0000000000000000" in status
        assert "NoNewPrivs:\t1" in status


def test_root_file_system_is_read_only(pool) -> None:
    with pool.sandbox() as box:
        result = box.run_shell("touch /opt/x || touch /usr/x || echo refused")
        assert "Read-only file system" in result.stderr and result.stdout == "refused\n"
        assert "Read-only" in box.run_shell("echo hi > /opt/rollgym/agent/x.py").stderr
        assert box.run_shell("touch /work/ok /tmp/ok /dev/shm/ok").ok


def test_no_network(pool) -> None:
    with pool.sandbox() as box:
        assert box.run_shell("ls /sys/class/net").stdout.split() == ["lo"]
        probe = textwrap.dedent("""
            import socket
            try:
                socket.create_connection(("1.1.1.1", 53), timeout=2)
                print("reachable")
            except OSError as exc:
                print("unreachable", exc.errno)
        """)
        assert box.run_python(probe).stdout.startswith("unreachable")


def test_timeout_kills_the_command_and_the_next_call_works(pool) -> None:
    with pool.sandbox() as box:
        with pytest.raises(SandboxTimeout) as caught:
            box.run_shell("echo begun; sleep 61 & sleep 61", timeout=2)
        assert caught.value.result is not None and caught.value.result.stdout == "begun\n"
        assert box.run_shell("pgrep -c -f 'slee[p] 61' || true").stdout == "0\n"
        box.run_python("kept = 'yes'")
        with pytest.raises(SandboxTimeout):
            box.run_python("while True: pass", timeout=0.5)
        assert box.run_python("kept").stdout == "'yes'\n"
        assert box.state is SandboxState.READY


def test_a_python_call_that_ignores_sigint_is_killed_and_the_namespace_replaced(pool) -> None:
    with pool.sandbox() as box:
        box.run_python("import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); lost = 1")
        with pytest.raises(SandboxTimeout) as caught:
            box.run_python("while True: pass", timeout=0.3)
        assert (
            caught.value.result is not None and "namespace was reset" in caught.value.result.stderr
        )
        assert "NameError" in box.run_python("lost").stderr


def test_fork_bomb_is_contained(pool) -> None:
    # bash builtins only (no child of its own): init, keeper, executor, Python worker, this bash
    count = "n=0; for p in /proc/[0-9]*; do n=$((n + 1)); done; echo $n"
    with pool.sandbox() as box:
        assert box.run_shell(count).stdout == "5\n"
        with pytest.raises(SandboxTimeout):
            box.run_shell("bomb() { bomb | bomb & }; bomb; sleep 5", timeout=3)
        assert box.run_shell("echo alive").stdout == "alive\n"
        events = "cat /sys/fs/cgroup/pids/pids.events 2>/dev/null || cat /sys/fs/cgroup/pids.events"
        refused = box.run_shell(events).stdout.split()
        assert refused[0] == "max" and int(refused[1]) > 0  # the pids limit stopped it
        assert box.run_shell(count).stdout == "5\n"  # and the timeout took all of it


SMALL_MEMORY = SandboxConfig(memory_mb=64, work_dir_mb=8, tmp_dir_mb=8, shm_mb=8)


def test_memory_hog_is_killed_and_reported_and_the_box_retired_after() -> None:
    config = PoolConfig(size=1, box=SMALL_MEMORY, **QUIET)
    with DockerSandboxPool(config) as pool:
        with pool.sandbox() as box:
            hog_id = box.id
            with pytest.raises(SandboxOOM):
                box.run_shell("python3 -c \"x = b'x' * (256 << 20)\"")
            assert box.state is SandboxState.READY  # the agent's doing: the box lives on
            assert box.run_shell("echo alive").stdout == "alive\n"
            with pytest.raises(SandboxOOM):
                box.run_python("hog = b'x' * (256 << 20)")
            assert box.run_python("1 + 1").stdout == "2\n"
        with pool.sandbox(timeout=60) as box:
            assert box.id != hog_id


def test_a_box_given_a_cpuset_runs_only_on_those_cores() -> None:
    last = max(os.sched_getaffinity(0))
    config = PoolConfig(size=1, box=SandboxConfig(cpuset=str(last)), **QUIET)
    with DockerSandboxPool(config) as pool, pool.sandbox() as box:
        shown = box.run_shell("grep Cpus_allowed_list /proc/self/status").stdout
        assert shown.split() == ["Cpus_allowed_list:", str(last)]


def test_reset_leaves_no_files_processes_or_python_state() -> None:
    with DockerSandboxPool(PoolConfig(size=1, **QUIET)) as pool:
        with pool.sandbox() as box:
            box_id = box.id
            box.run_shell("touch .dot visible /tmp/t /dev/shm/s; mkdir -p deep/er; chmod 000 deep")
            box.run_shell(
                "setsid sleep 1000 >/dev/null 2>&1 < /dev/null & nohup sleep 999 >/dev/null 2>&1 &"
            )
            box.run_python("secret = 42")
            # the shell returns before its children exec sleep: wait (bounded) until both run
            both_running = box.run_shell(
                "for _ in $(seq 100); do"
                " [ \"$(pgrep -cf '^sleep (1000|999)$')\" = 2 ] && break; sleep 0.05; done;"
                " pgrep -cf '^sleep (1000|999)$'"
            )
            assert both_running.stdout == "2\n"
        with pool.sandbox() as box:
            assert box.id == box_id
            assert (
                box.run_shell("ls -A /work /tmp /dev/shm").stdout
                == "/dev/shm:\n\n/tmp:\n\n/work:\n"
            )
            assert box.run_shell("pgrep -c sleep || true").stdout == "0\n"
            assert "NameError" in box.run_python("secret").stderr


def test_container_killed_mid_call_is_reported_and_replaced(docker_client) -> None:
    with DockerSandboxPool(PoolConfig(size=1, **QUIET)) as pool:
        with pool.sandbox() as box:
            killed_id = box.id
            container = pool_containers(docker_client, pool.pool_id)[0]
            threading.Timer(0.5, container.kill).start()
            with pytest.raises(SandboxDied):
                box.run_shell("sleep 30")
        with pool.sandbox(timeout=60) as box:
            assert box.id != killed_id
            assert box.run_shell("echo fresh").stdout == "fresh\n"
        assert len(pool_containers(docker_client, pool.pool_id)) == 1


def freeze(container, tries: int = 3) -> None:
    """Pause ``container``; the cgroup freezer can fail on a loaded host ("unable to
    freeze"), so it is asked again (this test's subject is the deadline, not the freezer)."""
    import docker

    for attempt in range(tries):
        try:
            container.pause()
            return
        except docker.errors.APIError as exc:
            if "unable to freeze" not in str(exc) or attempt == tries - 1:
                raise
            time.sleep(1.0)


def test_a_box_that_stops_answering_hits_the_host_deadline(docker_client) -> None:
    config = PoolConfig(size=1, box=SandboxConfig(host_grace_s=1.0), **QUIET)
    with DockerSandboxPool(config) as pool:
        with pool.sandbox() as box:
            freeze(pool_containers(docker_client, pool.pool_id)[0])
            with pytest.raises(SandboxDied, match="stopped answering"):
                box.run_shell("echo frozen", timeout=0.5)
        with pool.sandbox(timeout=60) as box:
            assert box.run_shell("echo thawed").ok


def test_idle_box_killed_from_outside_is_replaced_by_the_health_check(docker_client) -> None:
    with DockerSandboxPool(PoolConfig(size=1, health_interval_s=0.2)) as pool:
        first = pool_containers(docker_client, pool.pool_id)[0]
        first.kill()

        def replaced() -> bool:
            running = [
                c for c in pool_containers(docker_client, pool.pool_id) if c.status == "running"
            ]
            return len(running) == 1 and running[0].id != first.id and pool.status().ready == 1

        wait_until(replaced)
        with pool.sandbox() as box:
            assert box.run_shell("echo healthy").stdout == "healthy\n"


def test_no_containers_or_folders_left_after_close(docker_client) -> None:
    pool = DockerSandboxPool(PoolConfig(size=2, **QUIET))
    pool.start()
    lease = pool.acquire()
    runtime = Path(pool.config.runtime_dir) / pool.pool_id
    assert len(pool_containers(docker_client, pool.pool_id)) == 2 and runtime.is_dir()
    pool.close()
    assert pool_containers(docker_client, pool.pool_id) == []
    assert not runtime.exists()
    assert lease.state is SandboxState.CLOSED


OWNER_SCRIPT = """
import sys, time
from rollgym.sandboxes.config import PoolConfig
from rollgym.sandboxes.docker import DockerSandboxPool
pool = DockerSandboxPool(PoolConfig(size=2, health_interval_s=0))
pool.start()
print(pool.pool_id, flush=True)
time.sleep(600)
"""


def test_leftovers_of_a_killed_owner_are_swept_by_the_next_pool(docker_client) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER_SCRIPT], stdout=subprocess.PIPE, text=True
    )
    try:
        assert owner.stdout is not None
        orphan_pool = owner.stdout.readline().strip()
        assert len(pool_containers(docker_client, orphan_pool)) == 2
    finally:
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
    assert len(pool_containers(docker_client, orphan_pool)) == 2  # nobody cleaned up
    with DockerSandboxPool(PoolConfig(size=1, **QUIET)) as pool:
        assert pool_containers(docker_client, orphan_pool) == []
        assert not (Path(pool.config.runtime_dir) / orphan_pool).exists()
        assert len(pool_containers(docker_client, pool.pool_id)) == 1
