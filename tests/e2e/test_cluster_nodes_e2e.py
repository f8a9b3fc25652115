"""The cluster across two Ray nodes joined over TCP, its sandboxes on a third host.

The head node runs here (``ray start --head``, token authentication), the second node in
a container of the app image that compose builds (``ray start --address=...``): its own
file system and address (``bench.ray_nodes``). ``rollgym cluster up`` joins that Ray
cluster (``ray_address``) and spreads its two servers, one per node (one CPU each). Both
servers start their sandboxes on the remote sandbox host (the second Docker engine,
``scripts/remote_dockerd.sh``, over mutual TLS): the container has no Docker engine of its
own and no socket mounted. In the order a run meets them: the router and ``rollgym
cluster status`` show both nodes and which server runs where; both servers' boxes are on
the sandbox host; a run trains from both servers and every update reaches the server in
the container over HTTP (the router's weight store is not on its file system); the
container killed is a node lost: its server's sessions get ``server_lost``, the other
server goes on, and when the container starts again Ray places the server there again,
it reopens its buffer (nothing it held is lost), sweeps the box its dead process left on
the sandbox host, and rejoins at the cluster's version.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import app_image
import httpx
import pytest
from test_cluster_e2e import (
    AGENT,
    AGENT_KEY,
    cluster_cli,
    job,
    per_server,
    status,
    train_from,
    until,
)

import docker
from bench.ray_nodes import RayHead, RayNode, bridge_gateway
from rollgym.contract.wire import PullRequest
from rollgym.run.cluster_process import ClusterProcess
from rollgym.sandboxes.docker.engine import engine_client
from rollgym.sandboxes.docker.owner import Owner
from rollgym.sandboxes.docker.provider import LABEL_OWNER
from rollgym.trainer.client import ServerClient


@pytest.fixture(scope="module")
def head(docker_client) -> Iterator[RayHead]:
    with RayHead(bridge_gateway(docker_client), cpus=1) as head:
        yield head


@pytest.fixture(scope="module")
def node(
    pytestconfig, docker_client, head, default_model_dir, remote_docker_host
) -> Iterator[RayNode]:
    app_image.wait(pytestconfig)  # the image compose builds, with this checkout's code
    mounts = [f"{default_model_dir}:ro", f"{remote_docker_host.cert_dir}:ro"]
    with RayNode(docker_client, head, cpus=1, mounts=mounts) as node:
        yield node


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory, head, node, default_model_dir, remote_docker_host
) -> Iterator[ClusterProcess]:
    root = tmp_path_factory.mktemp("cluster-nodes")
    # The sandbox host as a container reaches it: on the bridge's gateway, not loopback.
    sandbox_host = remote_docker_host.url.replace("127.0.0.1", head.ip)
    settings = {
        **head.env,
        "ROLLGYM_CLUSTER__RAY_ADDRESS": head.address,
        "ROLLGYM_CLUSTER__PLACEMENT": "spread",
        "ROLLGYM_CLUSTER__HEALTH_INTERVAL_S": "0.5",
        "ROLLGYM_CLUSTER__MEMORY_PER_SERVER_GIB": "2",
        "ROLLGYM_BUFFER__LEASE_TIMEOUT_S": "5",
        "ROLLGYM_ENGINE__MAX_MODEL_LEN": "1024",
        "ROLLGYM_SANDBOXES__POOL_SIZE": "1",
        "ROLLGYM_SANDBOXES__BACKEND": "remote",
        "ROLLGYM_SANDBOXES__REMOTE__URL": sandbox_host,
        "ROLLGYM_SANDBOXES__REMOTE__CERT_DIR": str(remote_docker_host.cert_dir),
        "ROLLGYM_AGENTS__KEYS": json.dumps({"e2e": AGENT_KEY}),
    }
    with ClusterProcess(
        servers=2, model_dir=default_model_dir, data_dir=root, threads=1, settings=settings
    ) as process:
        yield process


@pytest.fixture(scope="module")
def sandbox_engine(remote_docker_host) -> Iterator[docker.DockerClient]:
    client = engine_client(remote_docker_host)
    yield client
    client.close()


def box_owners(engine: docker.DockerClient) -> set[Owner]:
    """Whose sandbox boxes ``engine`` runs (the owner label: pid, start, host)."""
    boxes = engine.containers.list(all=True, filters={"label": "rollgym.sandbox"})
    return {o for c in boxes if (o := Owner.decode(c.labels.get(LABEL_OWNER, ""))) is not None}


@pytest.fixture
def client(cluster) -> Iterator[ServerClient]:
    with ServerClient(cluster.client_config(request_timeout_s=120.0)) as client:
        yield client


def test_the_router_and_cluster_status_show_a_server_on_each_node(cluster, node) -> None:
    now = status(cluster)
    assert [s.state for s in now.servers] == ["serving", "serving"]
    nodes = {n.address: n for n in now.nodes if n.alive}
    assert set(nodes) == {node.ip, cluster_head_ip(now)}
    assert sorted(name for n in nodes.values() for name in n.servers) == ["s0", "s1"]
    remote = nodes[node.ip]
    assert len(remote.servers) == 1 and not remote.router
    on_node = next(s for s in now.servers if s.name == remote.servers[0])
    assert on_node.url is not None and on_node.url.startswith(f"http://{node.ip}:")
    assert {s.name: s.weights_by for s in now.servers} == {
        s.name: "http" if s.name in remote.servers else "shared_file" for s in now.servers
    }
    printed = cluster_cli(cluster, "status", timeout_s=60)
    assert printed.returncode == 0, printed.stdout + printed.stderr
    assert node.ip in printed.stdout and "(router)" in printed.stdout


def cluster_head_ip(now) -> str:  # type: ignore[no-untyped-def]
    return next(n.address for n in now.nodes if n.router)


def test_both_servers_box_on_the_sandbox_host(cluster, node, sandbox_engine, docker_client) -> None:
    here = next(s for s in status(cluster).servers if s.weights_by == "shared_file")
    owners = box_owners(sandbox_engine)
    assert any((o.pid, o.host) == (here.pid, socket.gethostname()) for o in owners), owners
    assert any(o.host == node.hostname for o in owners), owners  # the container's server
    assert all(o.host != node.hostname for o in box_owners(docker_client))


def test_a_run_trains_from_both_nodes_and_updates_reach_the_container(
    client, cluster, node, tmp_path
) -> None:
    start = client.policy_version()
    result = train_from(cluster, client, 2, tmp_path / "run")
    assert result.steps == 2 and result.policy_version == client.policy_version() == start + 3
    made = per_server(cluster, "rollgym_trajectories_total", source="rollout")
    assert set(made) == {"s0", "s1"} and min(made.values()) > 0, made  # both nodes sampled
    assert [s.policy_version for s in status(cluster).servers] == [result.policy_version] * 2
    weights = cluster.data_dir / "weights"
    assert weights.is_dir() and not node.exists(weights)  # so it came over HTTP


def test_a_node_lost_is_a_server_lost_and_it_comes_back_with_the_node(
    client, cluster, node, sandbox_engine
) -> None:
    http = httpx.Client(base_url=cluster.url, headers=AGENT, timeout=60)
    before = status(cluster)
    remote = next(n for n in before.nodes if n.alive and n.address == node.ip)
    victim = remote.servers[0]
    other = "s0" if victim == "s1" else "s1"
    sessions: dict[str, str] = {}
    while set(sessions.values()) != {"s0", "s1"}:
        made = http.post("/v1/sessions", json={"env_id": "rollgym/GuessNumber-v0"})
        assert made.status_code == 201, made.text
        sessions[made.json()["session_id"]] = made.headers["X-Rollgym-Server"]
    client.start_rollouts(job())  # nobody pulls: the victim's buffer fills
    until(
        lambda: per_server(cluster, "rollgym_buffer_groups", state="ready").get(victim, 0) >= 1,
        600, "groups in the container's buffer",
    )  # fmt: skip
    client.stop_rollouts()
    held = per_server(cluster, "rollgym_buffer_groups", state="ready")[victim]
    version = client.policy_version()
    address = node.ip
    left = {o for o in box_owners(sandbox_engine) if o.host == node.hostname}
    assert len(left) == 1  # its pool's one box, which its death will leave behind

    node.kill()
    until(lambda: server(cluster, victim).state != "serving", 120, "the router to notice")
    on_victim = next(sid for sid, home in sessions.items() if home == victim)
    lost = http.post(f"/v1/sessions/{on_victim}/step", json={"action": "3"})
    assert lost.status_code == 503 and lost.json()["error"] == "server_lost", lost.text
    on_other = next(sid for sid, home in sessions.items() if home == other)
    kept = http.post(f"/v1/sessions/{on_other}/step", json={"action": "3"})
    assert kept.status_code in (200, 409) and kept.headers["X-Rollgym-Server"] == other
    until(
        lambda: any(n.address == address and not n.alive for n in status(cluster).nodes),
        120, "Ray to mark the node lost",
    )  # fmt: skip

    node.start()  # the node returns: Ray places the lost server on it again
    until(lambda: server(cluster, victim).state == "serving", 900, "the server to rejoin")
    back = server(cluster, victim)
    assert back.restarts == 1 and back.node != next(
        s.node for s in before.servers if s.name == victim
    )
    assert back.policy_version == version == client.policy_version()
    assert back.weights_by == "http"
    assert per_server(cluster, "rollgym_buffer_groups", state="ready")[victim] == held
    now = {o for o in box_owners(sandbox_engine) if o.host == node.hostname}
    assert now and not now & left  # the dead process's box swept, the new one's there
    pulled = client.pull(
        PullRequest(trainer_version=version, max_staleness=1, num_groups=64, timeout_s=5)
    )
    assert len(pulled.groups) >= held
    client.ack([g.group_id for g in pulled.groups])


def server(cluster, name: str):  # type: ignore[no-untyped-def]
    return next(s for s in status(cluster).servers if s.name == name)
