"""Scaling out: the same environment-bound workload on 1 and 2 servers behind the router.

    .venv/bin/python -m bench.cluster [--groups 48] [--env-latency 0.5] [--slots 4]

Three rows, each against a baseline from the same run:

1. **episodes/s at 2 servers vs 1**: ``rollgym cluster up`` with 1, then 2 servers, on the
   default model; a rollout job of ``bench.cluster_env``'s env (each step holds one of
   ``--slots`` places of its server's pool for ``--env-latency`` s, so the environment,
   not the model, bounds throughput; the same pool size per server). A consumer pulls and
   acks through the router like a trainer; the rate is when ``--groups`` groups' episodes
   ended on the servers, after ``--warmup`` groups. Target: at least 1.8x at 2 servers.
2. **the router's hop**: the same call (``GET /v1/models``, answered by the server without
   the engine) straight to a server and through the router, interleaved; the difference
   of the medians is what the router adds per call. Target: at most 1 ms at p50. For
   scale, the same call through vllm-router (the Rust router of the vLLM project, policy
   ``sticky_least_loaded``) in front of the same two servers.
3. **weight fan-out**: one weight update through the router to 2 servers against the same
   update to 1 server (median of ``--updates``): the staging is shared, the loads run at
   once.

``--nodes 2`` runs the same rows across two Ray nodes (``bench.ray_nodes``: a head here,
one CPU; a node in a container of the app image, one CPU), the servers spread one per
node: the 2-server rows then cross the network (Ray over TCP, the router's calls and the
weight upload to the container's server over HTTP). The 1-server baseline runs on the
same two-node Ray cluster.
"""

from __future__ import annotations

import argparse
import contextlib
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from bench.cluster_env import ENV_ID
from bench.ray_nodes import RayHead, RayNode, bridge_gateway, server_mounts
from rollgym.cluster.status import ClusterStatus
from rollgym.contract.paths import default_model_dir
from rollgym.contract.wire import PullRequest, RolloutJob, SamplingSettings
from rollgym.run.cluster_process import ClusterProcess

Row = tuple[str, str, str, str, str]
GROUP_SIZE = 4


def job(args: argparse.Namespace, servers: int) -> RolloutJob:
    # 2 groups per server per batch: a window of 4 groups (16 episodes) per server keeps its
    # 4 slots busy, so the slow service is the bottleneck, with little work half done at
    # the edges of the measured window.
    return RolloutJob(
        env_id=f"bench.cluster_env:{ENV_ID}",
        env_kwargs={"turns": 2, "latency_s": args.env_latency, "slots": args.slots},
        group_size=GROUP_SIZE,
        groups_per_batch=2 * servers,
        max_staleness=1,
        sampling=SamplingSettings(temperature=1.0, max_tokens=4),
        drop_zero_variance=False,
    )


def episodes_per_s(http: httpx.Client, work: RolloutJob, warmup: int, measured: int) -> float:
    """Start the job ``work``, pull and ack like a trainer; the servers' production rate.

    The rate comes from when episodes ended on the servers (``created_at``), not from
    when they were pulled, so a backlog the consumer finds does not count as speed; the
    first ``warmup`` groups (engine and env start-up) are left out, ``measured`` counted."""
    started_job = http.post("/admin/rollouts", json=work.model_dump(mode="json"))
    started_job.raise_for_status()
    pull = PullRequest(trainer_version=0, max_staleness=1, num_groups=64, timeout_s=2.0)
    ended: list[float] = []
    while len(ended) < (warmup + measured) * work.group_size:
        answer = http.post("/admin/buffer/pull", json=pull.model_dump(mode="json"), timeout=60)
        answer.raise_for_status()
        groups = answer.json()["groups"]
        if groups:
            http.post("/admin/buffer/ack", json={"group_ids": [g["group_id"] for g in groups]})
        ended += [t["created_at"] for g in groups for t in g["trajectories"]]
    http.delete("/admin/rollouts").raise_for_status()
    window = sorted(ended)[warmup * work.group_size :]
    return (len(window) - 1) / (window[-1] - window[0])


def hop_ms(bases: dict[str, str], calls: int) -> dict[str, float]:
    """Median ms of ``GET /v1/models`` at each base URL, the calls interleaved; and for each
    base but ``direct``, the median of its per-round difference to ``direct`` (``*_hop_ms``:
    robust to the machine's load drifting during the measurement)."""
    clients = {name: httpx.Client(base_url=url) for name, url in bases.items()}
    times: dict[str, list[float]] = {name: [] for name in bases}
    try:
        for _ in range(20):  # connections open, caches warm
            for client in clients.values():
                client.get("/v1/models").raise_for_status()
        for _ in range(calls):
            for name, client in clients.items():
                started = time.perf_counter()
                client.get("/v1/models").raise_for_status()
                times[name].append(time.perf_counter() - started)
    finally:
        for client in clients.values():
            client.close()
    out = {f"{name}_ms": statistics.median(t) * 1e3 for name, t in times.items()}
    for name, t in times.items():
        if name != "direct":
            hops = [a - b for a, b in zip(t, times["direct"], strict=True)]
            out[f"{name}_hop_ms"] = statistics.median(hops) * 1e3
    return out


@contextlib.contextmanager
def vllm_router(server_urls: list[str]) -> Iterator[str]:
    """vllm-router in front of ``server_urls`` (policy sticky_least_loaded); its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [
        str(Path(sys.executable).parent / "vllm-router"), "--worker-urls", *server_urls,
        "--policy", "sticky_least_loaded", "--host", "127.0.0.1", "--port", str(port),
        "--log-level", "warning",
    ]  # fmt: skip
    router = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{url}/v1/models").raise_for_status()
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield url
    finally:
        router.terminate()
        router.wait(timeout=30)


def update_s(http: httpx.Client, weights: bytes, updates: int) -> float:
    """Median seconds of a weight update through the router (stage + fan-out + answer)."""
    times = []
    for _ in range(updates):
        version = http.get("/health").json()["policy_version"]
        started = time.perf_counter()
        answer = http.post(
            "/admin/weights", content=weights, headers={"X-Expected-Version": str(version)}
        )
        answer.raise_for_status()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


@contextlib.contextmanager
def two_nodes(model_dir: Path) -> Iterator[dict[str, str]]:
    """A two-node Ray cluster for the run; yields the settings that make a cluster join it."""
    import docker

    client = docker.from_env()
    # bench/ on the node: its servers import this benchmark's environment from there
    mounts = server_mounts(model_dir, f"{Path(__file__).parent}:ro")
    with (
        RayHead(bridge_gateway(client), cpus=1) as head,
        RayNode(client, head, cpus=1, mounts=mounts),
    ):
        yield {
            **head.env,
            "ROLLGYM_CLUSTER__RAY_ADDRESS": head.address,
            "ROLLGYM_CLUSTER__PLACEMENT": "spread",
        }


def measure(
    args: argparse.Namespace, servers: int, root: Path, ray: dict[str, str]
) -> dict[str, float]:
    """``ray``: settings that join an existing Ray cluster (none: a local one)."""
    token = secrets.token_urlsafe(24)
    settings = {"ROLLGYM_ENGINE__MAX_MODEL_LEN": "512", "ROLLGYM_ENGINE__WARMUP": "true", **ray}
    print(f"starting a cluster of {servers} (Ray, engines)...", flush=True)
    with (
        ClusterProcess(
            servers=servers, model_dir=args.model_dir, data_dir=root / f"c{servers}",
            admin_token=token, settings=settings, threads=1,
        ) as cluster,
        httpx.Client(
            base_url=cluster.url, headers={"Authorization": f"Bearer {token}"}, timeout=120
        ) as http,
    ):  # fmt: skip
        status = ClusterStatus.model_validate_json(http.get("/admin/cluster").content)
        print("  " + ", ".join(f"{s.name} at {s.url} ({s.weights_by})" for s in status.servers))
        server_url = status.servers[0].url
        assert server_url is not None
        out = {"eps": episodes_per_s(http, job(args, servers), args.warmup, args.groups)}
        bases = {"direct": server_url, "routed": cluster.url}
        if servers > 1:  # for scale: the existing router, in front of the same servers
            urls = [s.url for s in status.servers if s.url is not None]
            with vllm_router(urls) as other:
                out.update(hop_ms({**bases, "vllm_router": other}, args.calls))
        else:
            out.update(hop_ms(bases, args.calls))
        weights = (Path(args.model_dir) / "model.safetensors").read_bytes()
        out["update_s"] = update_s(http, weights, args.updates)
    print(
        f"  {servers} server(s): " + ", ".join(f"{k} {v:.4g}" for k, v in out.items()), flush=True
    )
    return out


def rows(one: dict[str, float], two: dict[str, float], nodes: int) -> list[Row]:
    hop = [two["routed_hop_ms"], one["routed_hop_ms"]]
    two_of = "2 servers on 2 nodes" if nodes == 2 else "2 servers"
    return [
        (
            f"env-bound episodes/s, {two_of} vs 1",
            f"{two['eps']:.2f}/s",
            f"{one['eps']:.2f}/s",
            f"{two['eps'] / one['eps']:.2f}x",
            ">= 1.8x",
        ),
        (
            f"router hop, GET /v1/models p50 ({two_of})",
            f"{two['routed_ms']:.2f} ms",
            f"{two['direct_ms']:.2f} ms direct",
            f"+{hop[0]:.2f} ms",
            f"<= 1 ms added (1 server: +{hop[1]:.2f} ms)",
        ),
        (
            "vllm-router hop, same call, same 2 servers",
            f"{two['vllm_router_ms']:.2f} ms",
            f"{two['direct_ms']:.2f} ms direct",
            f"+{two['vllm_router_hop_ms']:.2f} ms",
            "for scale: the existing Rust router",
        ),
        (
            f"weight update via router, {two_of} vs 1",
            f"{two['update_s'] * 1e3:.0f} ms",
            f"{one['update_s'] * 1e3:.0f} ms",
            f"{two['update_s'] / one['update_s']:.2f}x",
            "one staged copy, loads at once",
        ),
    ]


def print_table(table: list[Row]) -> None:
    headers = ("row", "measured", "baseline (same run)", "ratio", "target / note")
    widths = [max(len(r[i]) for r in [headers, *table]) for i in range(5)]
    line = "  ".join("-" * w for w in widths)
    print(line)
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    print(line)
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    print(line)


def main(args: argparse.Namespace) -> None:
    with (
        tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp,
        two_nodes(args.model_dir) if args.nodes == 2 else contextlib.nullcontext({}) as ray,
    ):
        one = measure(args, 1, Path(tmp), ray)
        two = measure(args, 2, Path(tmp), ray)
    print_table(rows(one, two, args.nodes))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=48, help="groups measured per size")
    parser.add_argument("--warmup", type=int, default=12, help="groups left out first")
    parser.add_argument("--env-latency", type=float, default=0.5, help="seconds per env step")
    parser.add_argument("--slots", type=int, default=4, help="env steps at once per server")
    parser.add_argument("--calls", type=int, default=300, help="calls per hop measurement")
    parser.add_argument("--updates", type=int, default=5, help="weight updates per size")
    parser.add_argument("--model-dir", type=Path, default=default_model_dir())
    parser.add_argument(
        "--nodes", type=int, choices=[1, 2], default=1, help="2: a second Ray node in a container"
    )
    main(parser.parse_args())
