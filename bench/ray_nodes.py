"""A Ray cluster of two nodes on one machine: a head here, a second node in a container.

How a user grows a cluster (docs/cluster.md, "Across Ray nodes"), done by the e2e tier
and `bench.cluster --nodes 2`:

Both are context managers (started on entry, gone on exit).

* ``RayHead``: ``ray start --head`` on this machine, listening on the Docker bridge's
  gateway so containers reach it, with token authentication (``RAY_AUTH_MODE=token``: a
  node or a driver without the token is refused).
* ``RayNode``: ``ray start --address=<head>`` in a container of the app image that compose
  builds: its own file system (the router's weight store is not there), its own address
  on the bridge. ``kill`` is a node lost (SIGKILL to the container), ``start`` brings the
  same container back (its file system, the servers' data dirs included, kept), and Ray
  places the servers it lost there again.

The head's processes are found by its temp dir, so stopping it never touches another Ray
on the machine (``ray stop`` would end them all).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil

import docker
from rollgym.run.server_process import free_port
from rollgym.sandboxes.config import default_runtime_dir

RAY = str(Path(sys.executable).with_name("ray"))
APP_IMAGE = "rollgym/app:latest"
OBJECT_STORE_BYTES = str(80 << 20)  # rollgym puts nothing in Ray's object store


def server_mounts(model_dir: Path, *extra: str) -> list[str]:
    """What a node needs of this machine to run rollout servers: the model (read-only, at
    the path the servers are configured with), the Docker engine that starts sandboxes
    and the boxes' socket folder (the engine mounts it by its host path)."""
    runtime = default_runtime_dir()
    os.makedirs(runtime, exist_ok=True)
    return [f"{model_dir}:ro", "/var/run/docker.sock", runtime, *extra]


def bridge_gateway(client: docker.DockerClient) -> str:
    """This machine's address on Docker's default bridge: what a container reaches it by.
    Some engines list only the bridge's subnet; its gateway is then the subnet's first
    address (``docker0``'s, 172.17.0.1 by default)."""
    config = client.networks.get("bridge").attrs["IPAM"]["Config"][0]
    if config.get("Gateway"):
        return config["Gateway"]
    return str(next(ipaddress.ip_network(config["Subnet"]).hosts()))


class RayHead:
    """``ray start --head`` here (see the module docstring)."""

    def __init__(self, address: str, cpus: int) -> None:
        self.ip = address
        self.port = free_port(address)
        self.token = secrets.token_hex(24)
        # Ray's unix sockets live under its temp dir: a short path keeps them under 108 bytes.
        self.temp_dir = tempfile.mkdtemp(prefix="rg-ray-", dir="/tmp")
        self.cpus = cpus

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """What every process of this cluster needs: the token, no usage report."""
        return {
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": self.token,
            "RAY_USAGE_STATS_ENABLED": "0",
        }

    def __enter__(self) -> RayHead:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        subprocess.run(
            [RAY, "start", "--head", f"--node-ip-address={self.ip}", f"--port={self.port}",
             f"--num-cpus={self.cpus}", f"--object-store-memory={OBJECT_STORE_BYTES}",
             "--include-dashboard=false", f"--temp-dir={self.temp_dir}",
             "--disable-usage-stats"],
            env={**os.environ, **self.env}, check=True, capture_output=True, timeout=180,
        )  # fmt: skip

    def stop(self) -> None:
        """End every process of this head (they name its temp dir), then remove the dir."""
        mine = [
            p
            for p in psutil.process_iter(["cmdline"])
            if any(self.temp_dir in arg for arg in p.info["cmdline"] or ())
        ]
        for process in mine:
            with contextlib.suppress(psutil.Error):
                process.kill()
        psutil.wait_procs(mine, timeout=30)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


class RayNode:
    """A Ray worker node in a container of the app image (see the module docstring)."""

    def __init__(
        self, client: docker.DockerClient, head: RayHead, *, cpus: int, mounts: list[str]
    ) -> None:
        """``mounts``: host folders the node sees at the same path (``path`` or ``path:ro``)."""
        self.client = client
        self.head = head
        self.cpus = cpus
        self.mounts = mounts
        self.name = f"rollgym-ray-node-{secrets.token_hex(4)}"

    def __enter__(self) -> RayNode:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def start(self) -> None:
        """Create and start the container, or start it again after ``kill``."""
        try:
            self.client.containers.get(self.name).start()
            return
        except docker.errors.NotFound:
            pass
        volumes = {}
        for mount in self.mounts:
            path, _, mode = mount.partition(":")
            volumes[path] = {"bind": path, "mode": mode or "rw"}
        self.client.containers.run(
            APP_IMAGE,
            entrypoint=["ray"],
            command=["start", f"--address={self.head.address}", f"--num-cpus={self.cpus}",
                     f"--object-store-memory={OBJECT_STORE_BYTES}", "--block",
                     "--disable-usage-stats"],
            name=self.name,
            detach=True,
            shm_size="256m",  # Ray's object store is in /dev/shm (64 MiB by default)
            labels={"rollgym.test": "ray-node"},
            environment={
                **self.head.env,
                # This image's Python is Debian's 3.11 (another patch release than the
                # head's): Ray refuses a patch mismatch unless told minor is enough.
                "RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL": "minor",
            },
            volumes=volumes,
        )  # fmt: skip

    @property
    def ip(self) -> str:
        """Its address on the bridge while it runs ("" once killed)."""
        container = self.client.containers.get(self.name)
        return str(container.attrs["NetworkSettings"]["Networks"]["bridge"]["IPAddress"])

    @property
    def hostname(self) -> str:
        """The host name its processes see (what labels their sandbox boxes)."""
        return str(self.client.containers.get(self.name).attrs["Config"]["Hostname"])

    def kill(self) -> None:
        self.client.containers.get(self.name).kill()

    def exists(self, path: Path) -> bool:
        """Whether ``path`` is there in the node's own file system."""
        done = self.client.containers.get(self.name).exec_run(["test", "-e", str(path)])
        return done.exit_code == 0

    def remove(self) -> None:
        with contextlib.suppress(docker.errors.NotFound):
            self.client.containers.get(self.name).remove(force=True)
