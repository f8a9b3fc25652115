"""The attack suite: every boundary of the box, tried as a hostile agent would.

Each test makes one kind of attempt, through the sandbox API as agent code or through an
env as an agent's messages, and asserts two things: the attempt failed, and the pool and
the host still work after it (``assert_still_fine``). Boundaries: box to host
(``test_box_to_host``), box to box (``test_box_to_box``), episode to episode
(``test_episode_to_episode``), agent to executor (``test_executor``), agent to reward
(``test_reward_forgery``), agent to failure kind (``test_failure_kinds``), and boxes
that outlive their owner (``test_owner_exit``). An escape found in the future becomes a
test here first. The suite's ``pool`` runs the tests of the box's own boundaries (host,
other boxes, episodes, executor, owner exit) twice: boxes on this machine's engine, and
boxes on a remote Docker host (a second engine reached over mutual TLS, the executor
through a relay in the box: ``sandboxes.docker.relay``); the host's judging and parsing
tests run on this machine's engine only (``conftest.ONLY_LOCAL``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from rollgym.sandboxes.base import Check
from rollgym.sandboxes.config import PoolConfig, RemoteHost, SandboxConfig
from rollgym.sandboxes.docker import DockerSandboxPool
from rollgym.sandboxes.docker.engine import engine_client
from rollgym.sandboxes.docker.provider import BOX_RUNTIME_DIR

# Small enough that filling memory and disk is quick; a grace that keeps a SIGINTed
# Python call's namespace on a loaded machine.
BOX = SandboxConfig(
    memory_mb=256, work_dir_mb=64, tmp_dir_mb=64, shm_mb=32, pids_limit=64, python_grace_s=2
)
BOX_DIR = re.compile(r"^[0-9a-f]{8}-\d{3}$")
HOST_FILES = {"owner", "agent"}  # the pool's own, besides the boxes' folders
BOX_FILES = {"executor.sock", "python.sock"}


def quiet_pool(
    size: int = 2, box: SandboxConfig = BOX, remote: RemoteHost | None = None
) -> DockerSandboxPool:
    return DockerSandboxPool(PoolConfig(size=size, health_interval_s=0, box=box, remote=remote))


def runtime_folder(pool: DockerSandboxPool) -> Path:
    return Path(pool.config.runtime_dir) / pool.pool_id


def box_folder(pool: DockerSandboxPool, box_id: str) -> Path:
    """Where a box's sockets lie: a host folder, or for a remote box its own tmpfs."""
    if pool.config.remote is not None:
        return Path(BOX_RUNTIME_DIR)
    return runtime_folder(pool) / box_id


def runtime_files(pool: DockerSandboxPool, box_id: str) -> list[str]:
    """The names in a box's socket folder (a remote box's, read in it as the relay's user)."""
    remote = pool.config.remote
    if remote is None:
        return sorted(path.name for path in box_folder(pool, box_id).iterdir())
    client = engine_client(remote)
    try:
        container = client.containers.get(f"rollgym-sbx-{box_id}")
        listing = container.exec_run(["ls", "-A", BOX_RUNTIME_DIR], user=str(remote.relay_uid))
    finally:
        client.close()
    assert listing.exit_code == 0, listing.output
    return sorted(listing.output.decode().split())


def assert_host_untouched(pool: DockerSandboxPool) -> None:
    """The pool's host folder holds only what the pool made, all of it ours, no links; a
    remote pool has nothing on this machine's disk."""
    root = runtime_folder(pool)
    if pool.config.remote is not None:
        assert not root.exists(), f"a remote pool made {root}"
        return
    for path in root.rglob("*"):
        info = path.lstat()
        relative = path.relative_to(root).parts
        assert info.st_uid == os.getuid(), f"{path} belongs to uid {info.st_uid}"
        assert not path.is_symlink(), f"{path} is a link"
        if relative[0] in HOST_FILES:
            assert relative[0] == "agent" or len(relative) == 1
            continue
        assert BOX_DIR.match(relative[0]), f"{path}: not the pool's"
        assert len(relative) == 1 or relative[1] in BOX_FILES, f"{path}: not the executor's"


def assert_still_fine(pool: DockerSandboxPool) -> None:
    """The host holds nothing a box wrote, and every box of the pool works end to end."""
    assert_host_untouched(pool)
    boxes = [pool.acquire(timeout=60) for _ in range(pool.config.size)]
    try:
        for box in boxes:
            assert box.run_shell("echo fine").stdout == "fine\n"
            assert box.run_python("6 * 7").stdout == "42\n"
            box.write_file("fine.txt", "fine")
            assert box.read_file("fine.txt") == b"fine"
            checks = [Check("test -f fine.txt"), Check("test -f nothing")]
            assert box.verify(checks) == (True, False)
    finally:
        for box in boxes:
            pool.release(box)
    assert_host_untouched(pool)
