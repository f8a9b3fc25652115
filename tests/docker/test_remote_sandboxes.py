"""Boxes on a remote Docker host: a second engine on this machine (its own data root and
socket, a TLS listener that wants client certificates), reached as a remote one would be.

What the attack suite does not say already (it runs on this backend too): the boxes live
on the remote engine and nothing of them on this machine's disk or engine, a closed pool
leaves nothing there either, the engine admits only this client's certificate, and the
many-images pool and the server's settings reach it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from docker.tls import TLSConfig

import docker
from rollgym.sandboxes.config import ImagePoolConfig, PoolConfig, RemoteHost, SandboxConfig
from rollgym.sandboxes.docker import DockerImagePool, DockerSandboxPool
from rollgym.sandboxes.docker.engine import engine_client
from rollgym.sandboxes.docker.provider import LABEL, LABEL_POOL

QUIET = {"health_interval_s": 0}


@pytest.fixture
def remote_client(remote_docker_host: RemoteHost):  # type: ignore[no-untyped-def]
    client = engine_client(remote_docker_host)
    yield client
    client.close()


def _labelled(client: docker.DockerClient, label: str) -> tuple[list, list]:
    containers = client.containers.list(all=True, filters={"label": label}, sparse=True)
    volumes = client.volumes.list(filters={"label": label})
    return containers, volumes


def test_remote_boxes_live_there_and_leave_nothing_behind(
    remote_docker_host: RemoteHost, remote_client: docker.DockerClient, docker_client
) -> None:
    with DockerSandboxPool(PoolConfig(size=2, remote=remote_docker_host, **QUIET)) as pool:
        label = f"{LABEL_POOL}={pool.pool_id}"
        with pool.sandbox() as box:
            assert box.run_shell("echo remote").stdout == "remote\n"
            assert box.run_python("6 * 7").stdout == "42\n"
            box.write_file("notes.txt", "kept in the box")
            assert box.read_file("notes.txt") == b"kept in the box"
        containers, volumes = _labelled(remote_client, label)
        assert len(containers) == 2 and len(volumes) == 1  # the boxes and the executor's code
        assert _labelled(docker_client, label) == ([], [])  # nothing on this machine's engine
        assert not (Path(pool.config.runtime_dir) / pool.pool_id).exists()
    assert _labelled(remote_client, label) == ([], [])


def test_the_engine_admits_only_a_client_with_its_certificate(
    remote_docker_host: RemoteHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(docker.errors.DockerException):  # plain TCP: the engine wants TLS
        docker.DockerClient(base_url=remote_docker_host.url.replace("tcp://", "http://"))
    ca = f"{remote_docker_host.cert_dir}/ca.pem"
    with pytest.raises(docker.errors.DockerException):  # TLS without a client certificate
        docker.DockerClient(
            base_url=remote_docker_host.url, tls=TLSConfig(ca_cert=ca, verify=True)
        ).ping()
    # A CA bundle named by the environment never replaces the engine's own CA.
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")
    client = engine_client(remote_docker_host)
    assert client.ping()
    client.close()


def test_the_many_images_pool_runs_on_the_remote_host(
    remote_docker_host: RemoteHost, remote_client: docker.DockerClient
) -> None:
    config = ImagePoolConfig(max_boxes=1, remote=remote_docker_host, **QUIET)
    with DockerImagePool(config) as pool:
        with pool.sandbox() as box:
            assert box.run_shell("hostname").ok
            assert box.run_python("'there'").stdout == "'there'\n"
        assert len(remote_client.containers.list(filters={"label": LABEL}, sparse=True)) >= 1


SERVER_POOL = textwrap.dedent("""
    from rollgym.sandboxes.metrics import NullMetrics
    from rollgym.server.app import _docker_pool
    from rollgym.server.config import ServerSettings

    settings = ServerSettings()  # from the ROLLGYM_* variables, as `rollgym serve` reads them
    pool = _docker_pool(settings.sandboxes, NullMetrics())
    pool.start()
    with pool.sandbox() as box:
        print(settings.sandboxes.backend, box.run_shell("echo served").stdout.strip())
    pool.close()
""")


def test_the_servers_settings_choose_the_remote_backend(remote_docker_host: RemoteHost) -> None:
    env = {
        "ROLLGYM_ADMIN_TOKEN": "a" * 32,
        "ROLLGYM_SANDBOXES__POOL_SIZE": "1",
        "ROLLGYM_SANDBOXES__BACKEND": "remote",
        "ROLLGYM_SANDBOXES__REMOTE__URL": remote_docker_host.url,
        "ROLLGYM_SANDBOXES__REMOTE__CERT_DIR": remote_docker_host.cert_dir,
        "PATH": "/usr/bin:/bin",
    }
    run = subprocess.run(
        [sys.executable, "-c", SERVER_POOL], env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["remote", "served"]


def test_a_named_oci_runtime_runs_the_box(
    remote_docker_host: RemoteHost, remote_client: docker.DockerClient
) -> None:
    # runc named explicitly (gVisor's runsc is not installed here): the field reaches the engine.
    box_config = SandboxConfig(oci_runtime="runc")
    config = PoolConfig(size=1, remote=remote_docker_host, box=box_config, **QUIET)
    with DockerSandboxPool(config) as pool, pool.sandbox() as box:
        assert box.run_shell("echo ok").stdout == "ok\n"
        container = remote_client.containers.get(f"rollgym-sbx-{box.id}")
        assert container.attrs["HostConfig"]["Runtime"] == "runc"
