"""The cluster across two Ray nodes joined over TCP: this machine, and a container.

The head node runs here (``ray start --head``, token authentication), the second node in
a container of the app image that compose builds (``ray start --address=...``): its own
file system and address (``ray_nodes``). ``rollgym cluster up`` joins that Ray cluster
(``ray_address``) and spreads its two servers, one per node (one CPU each). In the order
a run meets them: the router and ``rollgym cluster status`` show both nodes and which
server runs where; a run trains from both servers and every update reaches the server in
the container over HTTP (the router's weight store is not on its file system); the
container killed is a node lost: its server's sessions get ``server_lost``, the other
server goes on, and when the container starts again Ray places the server there again,
it reopens its buffer (nothing it held is lost) and rejoins at the cluster's version.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import app_image
import httpx
import pytest
from test_cluster_e2e import AGENT, AGENT_KEY, GROUP_SIZE, GROUPS, job, per_server, status, until

from bench.ray_nodes import RayHead, RayNode, bridge_gateway, server_mounts
from rollgym.contract.wire import PullRequest
from rollgym.run.cluster_process import ClusterProcess
from rollgym.trainer.client import ServerClient
from rollgym.trainer.config import TrainerConfig
from rollgym.trainer.loop import train


@pytest.fixture(scope="module")
def head(docker_client) -> Iterator[RayHead]:
    head = RayHead(bridge_gateway(docker_client), cpus=1)
    head.start()
    try:
        yield head
    finally:
        head.stop()


@pytest.fixture(scope="module")
def node(pytestconfig, docker_client, head, default_model_dir) -> Iterator[RayNode]:
    app_image.wait(pytestconfig)  # the image compose builds, with this checkout's code
    node = RayNode(docker_client, head, cpus=1, mounts=server_mounts(default_model_dir))
    node.start()
    try:
        yield node
    finally:
        node.remove()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, head, node, default_model_dir) -> Iterator[ClusterProcess]:
    root = tmp_path_factory.mktemp("cluster-nodes")
    settings = {
        **head.env,
        "ROLLGYM_CLUSTER__RAY_ADDRESS": head.address,
        "ROLLGYM_CLUSTER__PLACEMENT": "spread",
        "ROLLGYM_CLUSTER__HEALTH_INTERVAL_S": "0.5",
        "ROLLGYM_CLUSTER__MEMORY_PER_SERVER_GIB": "2",
        "ROLLGYM_BUFFER__LEASE_TIMEOUT_S": "5",
        "ROLLGYM_ENGINE__MAX_MODEL_LEN": "1024",
        "ROLLGYM_SANDBOXES__POOL_SIZE": "1",
        "ROLLGYM_AGENTS__KEYS": json.dumps({"e2e": AGENT_KEY}),
    }
    with ClusterProcess(
        servers=2, model_dir=default_model_dir, data_dir=root, threads=1, settings=settings
    ) as process:
        yield process


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
    env = {**os.environ, "ROLLGYM_ADMIN_TOKEN": cluster.admin_token}
    printed = subprocess.run(
        [sys.executable, "-m", "rollgym.cli", "cluster", "status", "--url", cluster.url],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert printed.returncode == 0, printed.stdout + printed.stderr
    assert node.ip in printed.stdout and "(router)" in printed.stdout


def cluster_head_ip(now) -> str:  # type: ignore[no-untyped-def]
    return next(n.address for n in now.nodes if n.router)


def test_a_run_trains_from_both_nodes_and_updates_reach_the_container(
    client, cluster, node, tmp_path
) -> None:
    start = client.policy_version()
    config = TrainerConfig(
        output_dir=tmp_path / "run", group_size=GROUP_SIZE, groups_per_batch=GROUPS,
        max_staleness=1, total_steps=2, learning_rate=1e-3, pull_timeout_s=5.0,
        stall_timeout_s=300.0,
    )  # fmt: skip
    result = train(
        config, client, cluster.model_dir, on_ready=lambda: client.start_rollouts(job()),
        printer=None,
    )  # fmt: skip
    client.stop_rollouts()
    assert result.steps == 2 and result.policy_version == client.policy_version() == start + 3
    made = per_server(cluster, "rollgym_trajectories_total", source="rollout")
    assert set(made) == {"s0", "s1"} and min(made.values()) > 0, made  # both nodes sampled
    assert [s.policy_version for s in status(cluster).servers] == [result.policy_version] * 2
    weights = cluster.data_dir / "weights"
    assert weights.is_dir() and not node.exists(weights)  # so it came over HTTP


def test_a_node_lost_is_a_server_lost_and_it_comes_back_with_the_node(
    client, cluster, node
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
    pulled = client.pull(
        PullRequest(trainer_version=version, max_staleness=1, num_groups=64, timeout_s=5)
    )
    assert len(pulled.groups) >= held
    client.ack([g.group_id for g in pulled.groups])


def server(cluster, name: str):  # type: ignore[no-untyped-def]
    return next(s for s in status(cluster).servers if s.name == name)
