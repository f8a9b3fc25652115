"""The Docker side's pure parts: the hardened container spec, owners, error translation."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests

import docker
from rollgym.sandboxes.agent.identity import User
from rollgym.sandboxes.base import SandboxError
from rollgym.sandboxes.config import PoolConfig, SandboxConfig
from rollgym.sandboxes.docker.engine import docker_errors
from rollgym.sandboxes.docker.owner import Owner, process_start_ticks
from rollgym.sandboxes.docker.provider import (
    BOX_AGENT_DIR,
    BOX_RUNTIME_DIR,
    DockerProvider,
    container_spec,
)

HOST = User(4321, 4322)


def spec(**changes) -> dict:
    return container_spec(SandboxConfig(**changes), Path("/rt/box"), Path("/rt/agent"), HOST)


def option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_the_spec_is_hardened() -> None:
    s = spec(memory_mb=512, cpus=0.5, pids_limit=64, uid=1234, gid=1235, verifier_uid=1236)
    assert s["network_mode"] == "none"
    assert s["cap_drop"] == ["ALL"] and s["security_opt"] == ["no-new-privileges"]
    assert sorted(s["cap_add"]) == ["KILL", "SETGID", "SETUID"]  # the executor's, no more
    assert s["read_only"] is True and s["init"] is True and s["auto_remove"] is True
    assert s["mem_limit"] == s["memswap_limit"] == "512m"
    assert s["nano_cpus"] == 500_000_000 and s["pids_limit"] == 64
    assert "uid=1234" in s["tmpfs"]["/work"] and "mode=1777" in s["tmpfs"]["/tmp"]
    assert "--contained" in s["command"]
    assert "privileged" not in s


def test_the_executor_is_root_and_everyone_else_has_a_user_of_their_own() -> None:
    s = spec(uid=1234, gid=1235, verifier_uid=1236, orphan_grace_s=7)
    assert s["user"] == "0:0"
    command = s["command"]
    assert option(command, "--agent-user") == "1234:1235"
    assert option(command, "--verifier-user") == "1236:1235"  # in the agent's group
    assert option(command, "--host-user") == "4321:4322"
    assert float(option(command, "--orphan-after")) == 7
    wiped = [command[i + 1] for i, arg in enumerate(command) if arg == "--wipe"]
    assert wiped == ["/work", "/tmp", "/dev/shm", "/dev/mqueue"]


@pytest.mark.parametrize("uid", [61000, 61001])
def test_a_host_user_that_is_also_a_box_user_is_refused(uid: int) -> None:
    provider = DockerProvider(PoolConfig(box=SandboxConfig(uid=61000, verifier_uid=61001)))
    provider.host = User(uid, uid)  # as if this process ran as the agent's or verifier's uid
    with pytest.raises(SandboxError, match="agent or verifier user"):
        provider.open()


def test_only_the_socket_folder_is_writable_and_the_executor_is_read_only() -> None:
    mounts = {m["Target"]: m for m in spec()["mounts"]}
    assert (
        mounts[BOX_RUNTIME_DIR]["Source"] == "/rt/box" and not mounts[BOX_RUNTIME_DIR]["ReadOnly"]
    )
    assert mounts[BOX_AGENT_DIR]["Source"] == "/rt/agent" and mounts[BOX_AGENT_DIR]["ReadOnly"]


def test_the_oci_runtime_is_the_engines_unless_named() -> None:
    assert spec()["runtime"] is None
    assert spec(oci_runtime="runsc")["runtime"] == "runsc"  # gVisor, where the engine has it
    with pytest.raises(ValueError, match="oci_runtime"):
        SandboxConfig(oci_runtime="--privileged")


def test_a_network_only_when_configured() -> None:
    assert spec(network="bridge")["network_mode"] == "bridge"


def test_the_environment_reaches_the_box() -> None:
    env = spec(environment={"TASK": "t1"})["environment"]
    assert env["TASK"] == "t1" and env["HOME"] == "/work" and env["TMPDIR"] == "/tmp"


def test_an_owner_is_alive_until_its_process_ends() -> None:
    me = Owner.me()
    assert not me.is_gone()
    assert Owner.decode(me.encode()) == me
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    started = process_start_ticks(child.pid)
    child.wait()
    assert Owner(child.pid, started or "", me.host).is_gone()
    assert Owner(os.getpid(), "0", me.host).is_gone()  # same pid, another start: a reused pid
    assert not Owner(1, "0", "another-host").is_gone()  # never judged from here
    assert Owner.decode("garbage") is None


@pytest.mark.parametrize(
    "error",
    [
        docker.errors.ImageNotFound("no such image"),
        docker.errors.APIError("boom"),
        requests.ConnectionError("refused"),
    ],
)
def test_docker_errors_never_leak(error: Exception) -> None:
    with pytest.raises(SandboxError) as caught, docker_errors("doing something"):
        raise error
    assert "doing something" in str(caught.value)
    assert not isinstance(caught.value, docker.errors.DockerException)
