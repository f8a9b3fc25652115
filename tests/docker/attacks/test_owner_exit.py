"""Boxes never outlive their owner: a process that made sandboxed envs exits normally at
its end and on SIGTERM or SIGINT, releasing its boxes; a box whose owner was killed
outright ends itself once no host has been connected for its grace."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from attack_kit import quiet_pool

import docker
from rollgym.sandboxes.docker.engine import engine_client
from rollgym.sandboxes.docker.provider import LABEL_POOL

REPO = Path(__file__).resolve().parents[3]

# A user's script, as a new user writes it: no pool of its own, and no env.close().
USER_SCRIPT = """
import sys, time
import gymnasium
import rollgym.envs
from rollgym.envs.scripted import fenced

env = gymnasium.make("rollgym/Shell-v0")
env.reset(options={"task_id": "make-dir"})
print(env.unwrapped.sandbox_pool.pool_id, flush=True)
env.step(fenced("bash", "mkdir reports"))
print("stepped", flush=True)
if sys.argv[1:] == ["wait"]:
    time.sleep(600)
"""

KILLED_OWNER = """
import sys
from rollgym.sandboxes.config import PoolConfig, RemoteHost, SandboxConfig
from rollgym.sandboxes.docker import DockerSandboxPool
remote = RemoteHost.model_validate_json(sys.argv[1]) if sys.argv[1:] else None
pool = DockerSandboxPool(PoolConfig(size=2, health_interval_s=0, box=SandboxConfig(orphan_grace_s=2), remote=remote))
pool.start()
lease = pool.acquire()
lease.run_shell("sleep 1000 >/dev/null 2>&1 &")
print(pool.pool_id, flush=True)
import time; time.sleep(600)
"""


def containers(docker_client, pool_id: str) -> list:
    """The pool's containers; one removed while they are listed counts as gone (the SDK
    inspects each listed container, and a box ending itself can vanish in between)."""
    while True:
        try:
            return docker_client.containers.list(
                all=True, filters={"label": f"{LABEL_POOL}={pool_id}"}
            )
        except docker.errors.NotFound:
            continue


def wait_until(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def start(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args], cwd=REPO, stdout=subprocess.PIPE, text=True
    )


def test_a_script_that_never_closes_its_env_exits_and_leaves_nothing(docker_client) -> None:
    owner = start(USER_SCRIPT)
    out, _ = owner.communicate(timeout=120)
    pool_id, stepped = out.split()
    assert owner.returncode == 0 and stepped == "stepped"
    assert containers(docker_client, pool_id) == []
    assert not list(Path("/tmp").glob(f"rollgym-sbx-*/{pool_id}"))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signalled_script_exits_and_releases_its_boxes(docker_client, signum: int) -> None:
    owner = start(USER_SCRIPT, "wait")
    assert owner.stdout is not None
    pool_id = owner.stdout.readline().strip()
    assert owner.stdout.readline().strip() == "stepped"
    assert len(containers(docker_client, pool_id)) == 1
    owner.send_signal(signum)
    owner.wait(timeout=60)
    assert owner.returncode in (128 + signum, -signum)
    assert containers(docker_client, pool_id) == []


@pytest.mark.parametrize("backend", ["local", "remote"])
def test_boxes_of_a_killed_owner_end_themselves(request, docker_client, backend: str) -> None:
    remote = request.getfixturevalue("remote_docker_host") if backend == "remote" else None
    engine = docker_client if remote is None else engine_client(remote)
    owner = start(KILLED_OWNER, *([remote.model_dump_json()] if remote else []))
    assert owner.stdout is not None
    pool_id = owner.stdout.readline().strip()
    try:
        assert len(containers(engine, pool_id)) == 2
    finally:
        owner.kill()
        owner.wait()
    # the boxes notice that no host is connected (or another pool's sweep got them first)
    assert wait_until(lambda: containers(engine, pool_id) == [], timeout=60)
    if remote is not None:  # the executor's code volume: the next pool's sweep removes it
        volumes = {"label": f"{LABEL_POOL}={pool_id}"}
        # at most one: make test's other worker may start a pool on this engine meanwhile
        # (the two-node cluster's servers box there), and its sweep removes it first
        assert len(engine.volumes.list(filters=volumes)) <= 1
        with quiet_pool(size=1, remote=remote):
            pass
        assert engine.volumes.list(filters=volumes) == []
        engine.close()
    for folder in Path("/tmp").glob(f"rollgym-sbx-*/{pool_id}"):  # the next pool's sweep's job
        subprocess.run(["rm", "-rf", str(folder)], check=True)
