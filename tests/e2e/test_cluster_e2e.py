"""Two rollout servers on a local Ray cluster behind the router, on the default model.

One cluster for the module (``rollgym cluster up`` as a child process), in the order a run
meets these things: a run trains from both servers; weights reach both under one version;
sessions stay on their server; one server's process is SIGKILLed during a rollout (its
sessions get a clear error, the other server keeps serving, Ray restarts it, its buffered
groups come back, it rejoins at the cluster's version, the sandbox it left is swept);
``cluster down`` leaves no process and no container behind. Each server has a sandbox
pool of one box, so containers are part of what must not leak. Last, ``rollgym run
--servers 2`` on a shrunken config.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from rollgym.cluster.status import ClusterStatus
from rollgym.contract.wire import PullRequest, RolloutJob, SamplingSettings
from rollgym.run.cluster_process import ClusterProcess
from rollgym.trainer.client import ServerClient
from rollgym.trainer.config import TrainerConfig
from rollgym.trainer.loop import TrainResult, train

GROUP_SIZE, GROUPS = 4, 2


AGENT_KEY = "e2e-agent-key-0123456789"
AGENT = {"Authorization": f"Bearer {AGENT_KEY}"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, default_model_dir) -> Iterator[ClusterProcess]:
    root = tmp_path_factory.mktemp("cluster-e2e")
    settings = {
        "ROLLGYM_BUFFER__LEASE_TIMEOUT_S": "5",
        "ROLLGYM_ENGINE__MAX_MODEL_LEN": "1024",
        "ROLLGYM_CLUSTER__HEALTH_INTERVAL_S": "0.5",
        "ROLLGYM_CLUSTER__MAX_RESTARTS": "2",
        "ROLLGYM_CLUSTER__MEMORY_PER_SERVER_GIB": "2",
        "ROLLGYM_SANDBOXES__POOL_SIZE": "1",
        "ROLLGYM_AGENTS__KEYS": json.dumps({"e2e": AGENT_KEY}),  # passed on to each server
    }
    with ClusterProcess(
        servers=2, model_dir=default_model_dir, data_dir=root, threads=1, settings=settings
    ) as process:
        yield process


@pytest.fixture
def client(cluster) -> Iterator[ServerClient]:
    with ServerClient(cluster.client_config(request_timeout_s=120.0)) as client:
        yield client


def status(cluster: ClusterProcess) -> ClusterStatus:
    answer = httpx.get(
        f"{cluster.url}/admin/cluster",
        headers={"Authorization": f"Bearer {cluster.admin_token}"},
        timeout=30,
    )
    answer.raise_for_status()
    return ClusterStatus.model_validate_json(answer.content)


def per_server(cluster: ClusterProcess, sample: str, **labels: str) -> dict[str, float]:
    """One metric's value per server, from the router's merged ``/metrics``."""
    text = httpx.get(f"{cluster.url}/metrics", timeout=30).text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
                out[s.labels["server"]] = s.value
    return out


def cluster_cli(
    cluster: ClusterProcess, command: str, timeout_s: float
) -> subprocess.CompletedProcess[str]:
    """``rollgym cluster <command>`` against the cluster's router, with its admin token."""
    return subprocess.run(
        [sys.executable, "-m", "rollgym.cli", "cluster", command, "--url", cluster.url],
        env={**os.environ, "ROLLGYM_ADMIN_TOKEN": cluster.admin_token},
        capture_output=True, text=True, timeout=timeout_s,
    )  # fmt: skip


def until(predicate, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.5)


def containers_of(docker_client, pids: set[int]) -> list[str]:
    """Sandbox containers owned by any of ``pids`` (the owner label: pid, start, host)."""
    boxes = docker_client.containers.list(all=True, filters={"label": "rollgym.sandbox"})
    return [c.name for c in boxes if int(c.labels.get("rollgym.owner", "0 x x").split()[0]) in pids]


def job() -> RolloutJob:
    return RolloutJob(
        env_id="rollgym/GuessNumber-v0",
        env_kwargs={"low": 1, "high": 8},
        group_size=GROUP_SIZE,
        groups_per_batch=GROUPS,
        max_staleness=1,
        max_turns=2,
        sampling=SamplingSettings(temperature=1.0, max_tokens=4),
        drop_zero_variance=False,
    )


def train_from(cluster: ClusterProcess, client: ServerClient, steps: int, out: Path) -> TrainResult:
    """``steps`` GRPO steps on ``job()``'s groups from the cluster, then its rollouts stopped."""
    config = TrainerConfig(
        output_dir=out, group_size=GROUP_SIZE, groups_per_batch=GROUPS, max_staleness=1,
        total_steps=steps, learning_rate=1e-3, pull_timeout_s=5.0, stall_timeout_s=300.0,
    )  # fmt: skip
    result = train(
        config, client, cluster.model_dir, on_ready=lambda: client.start_rollouts(job()),
        printer=None,
    )  # fmt: skip
    client.stop_rollouts()
    return result


def test_a_run_trains_from_both_servers_and_weights_reach_both(client, cluster, tmp_path) -> None:
    start = client.policy_version()
    result = train_from(cluster, client, 3, tmp_path / "run")
    assert result.steps == 3
    assert result.policy_version == client.policy_version() == start + 4
    assert all(r.version_lag_max <= 1 for r in result.records)  # the window held cluster-wide
    made = per_server(cluster, "rollgym_trajectories_total", source="rollout")
    assert set(made) == {"s0", "s1"} and min(made.values()) > 0, made  # both sampled
    servers = status(cluster).servers
    assert [s.policy_version for s in servers] == [result.policy_version] * 2


def test_sessions_stay_on_the_server_that_holds_them(cluster) -> None:
    http = httpx.Client(base_url=cluster.url, headers=AGENT, timeout=60)
    homes = {}
    for seed in range(4):
        made = http.post("/v1/sessions", json={"env_id": "rollgym/GuessNumber-v0", "seed": seed})
        assert made.status_code == 201, made.text
        homes[made.json()["session_id"]] = made.headers["X-Rollgym-Server"]
    assert set(homes.values()) == {"s0", "s1"}  # new sessions went to the less loaded one
    for session_id, home in homes.items():
        for guess in ("4", "6"):
            step = http.post(f"/v1/sessions/{session_id}/step", json={"action": guess})
            assert step.status_code in (200, 409), step.text  # 409: the episode ended
            assert step.headers["X-Rollgym-Server"] == home
        closed = http.delete(f"/v1/sessions/{session_id}")
        assert closed.headers["X-Rollgym-Server"] == home


def test_sigkill_of_a_server_during_a_rollout(client, cluster, docker_client) -> None:
    http = httpx.Client(base_url=cluster.url, headers=AGENT, timeout=60)
    sessions = {}  # opened first: a session takes window budget, refused once buffers are full
    while "s1" not in sessions.values() or "s0" not in sessions.values():
        made = http.post("/v1/sessions", json={"env_id": "rollgym/GuessNumber-v0"})
        assert made.status_code == 201, made.text
        sessions[made.json()["session_id"]] = made.headers["X-Rollgym-Server"]
    client.start_rollouts(job())  # nobody pulls: both buffers fill up to their share
    until(
        lambda: min(per_server(cluster, "rollgym_buffer_groups", state="ready").values(), default=0)
        >= 1,
        600, "groups in both buffers",
    )  # fmt: skip
    victim = next(s for s in status(cluster).servers if s.name == "s1")
    client.stop_rollouts()
    ready_before = per_server(cluster, "rollgym_buffer_groups", state="ready")["s1"]
    version = client.policy_version()

    assert victim.pid is not None
    assert containers_of(docker_client, {victim.pid})  # its warm sandbox
    os.kill(victim.pid, signal.SIGKILL)
    on_victim = next(sid for sid, home in sessions.items() if home == "s1")
    on_other = next(sid for sid, home in sessions.items() if home == "s0")
    lost = http.post(f"/v1/sessions/{on_victim}/step", json={"action": "3"})
    assert lost.status_code == 503 and lost.json()["error"] == "server_lost", lost.text
    kept = http.post(f"/v1/sessions/{on_other}/step", json={"action": "3"})
    assert kept.status_code in (200, 409) and kept.headers["X-Rollgym-Server"] == "s0"
    assert http.post("/v1/sessions", json={"env_id": "rollgym/GuessNumber-v0"}).status_code == 201

    until(lambda: status(cluster).servers[1].state == "serving", 600, "s1 to rejoin")
    back = status(cluster).servers[1]
    assert back.restarts == 1 and back.pid != victim.pid
    assert back.policy_version == version == client.policy_version()  # caught up, one lineage
    assert containers_of(docker_client, {victim.pid}) == []  # its restart swept the box
    again = per_server(cluster, "rollgym_buffer_groups", state="ready")["s1"]
    assert again == ready_before  # its buffered groups came back with it
    pulled = client.pull(
        PullRequest(trainer_version=version, max_staleness=1, num_groups=64, timeout_s=5)
    )
    assert len(pulled.groups) >= ready_before
    assert all(version - 1 <= g.min_version <= version for g in pulled.groups)
    client.ack([g.group_id for g in pulled.groups])


def test_cluster_down_leaves_no_process_and_no_container_behind(cluster, docker_client) -> None:
    assert cluster.pid is not None
    family = [psutil.Process(cluster.pid), *psutil.Process(cluster.pid).children(recursive=True)]
    assert len(family) > 3  # the router, Ray's own processes, the two servers
    down = cluster_cli(cluster, "down", timeout_s=300)
    assert down.returncode == 0, down.stdout + down.stderr
    _, alive = psutil.wait_procs(family, timeout=120)
    assert [p.pid for p in alive if p.status() != psutil.STATUS_ZOMBIE] == []
    assert containers_of(docker_client, {p.pid for p in family}) == []


def test_rollgym_run_with_two_servers(tmp_path) -> None:
    """The README's main command on a cluster: warm start, 2 servers, GRPO, evaluation."""
    config = {
        "run_dir": str(tmp_path / "run"),
        "servers": 2,
        "warmstart": {"demos": {"kind": "guess", "oracle_episodes": 24, "imperfect_episodes": 8,
                                "drill_episodes": 8}, "epochs": 1.0},
        "trainer": {"output_dir": "grpo", "group_size": 4, "groups_per_batch": 2,
                    "total_steps": 2, "max_staleness": 1},
        "eval_episodes": 8,
    }  # fmt: skip
    path = tmp_path / "run.json"
    path.write_text(json.dumps(config))
    done = subprocess.run(
        [sys.executable, "-m", "rollgym.cli", "run", "--preset", "guess", "--config", str(path)],
        capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "starting 2 rollout servers on Ray" in done.stdout
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["config"]["servers"] == 2, summary
