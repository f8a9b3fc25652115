"""Episodes/s with the sandboxes on a second host against boxes on the server's own host.

    .venv/bin/python -m bench.sandbox_hosts [--runs 3] [--slots 4] [--env-latency 0.5]

One rollout server on the default model, started twice per run: with its pool on this
machine's Docker engine (``backend: local``), then on the remote sandbox host
(``backend: remote``: the second engine of ``scripts/remote_dockerd.sh``, over mutual
TLS). The job plays ``rollgym-bench/SlowBox-v0`` (``bench.cluster_env``): a box from the
server's pool of ``--slots`` boxes for each episode, each step a Python call in it that
sleeps ``--env-latency`` s, so the boxes bound the throughput and every step crosses the
executor's round trip to where the boxes live. The rate counts episodes as they ended on
the server (``bench.cluster.episodes_per_s``). A table: each backend's episodes/s per run,
the median, and the ratio remote/local.

Then, in this process, what a lease costs on each backend: a pool of ``--slots`` boxes
leased one after another (so each box waits idle in the pool between its leases, as in a
warm pool with room), each lease two trivial Python calls then the release (the box's
reset): the median of each phase over ``--leases`` leases. A reset restarts the box's
Python worker; a remote box's connection to it is a ``docker exec``, which the client
opens ahead while the box waits (``ExecutorClient.connect_ahead``).

What it cannot show on one machine: capacity. The second engine shares this machine's
cores, so boxes on it add no CPU; the row measures what the remote path costs a
box-bound workload, which is what a user moving boxes off the server's host pays.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

from bench.cluster import episodes_per_s
from bench.cluster_env import BOX_ENV_ID
from rollgym.contract.paths import default_model_dir
from rollgym.contract.wire import RolloutJob, SamplingSettings
from rollgym.run.server_process import ServerProcess
from rollgym.sandboxes.config import PoolConfig, RemoteHost
from rollgym.sandboxes.docker import DockerSandboxPool

ROOT = Path(__file__).resolve().parents[1]


def remote_settings() -> dict[str, str]:
    """Start the second engine if needed; the settings that put a server's boxes there."""
    script = str(ROOT / "scripts" / "remote_dockerd.sh")
    subprocess.run([script, "start"], check=True)
    lines = subprocess.run([script, "env"], check=True, capture_output=True, text=True).stdout
    return dict(line.split("=", 1) for line in lines.split())


def job(args: argparse.Namespace) -> RolloutJob:
    # A window of 2 x 2 groups of 4 keeps the pool's boxes busy, as in bench.cluster.
    return RolloutJob(
        env_id=f"bench.cluster_env:{BOX_ENV_ID}",
        env_kwargs={"turns": 2, "latency_s": args.env_latency},
        group_size=4,
        groups_per_batch=2,
        max_staleness=1,
        sampling=SamplingSettings(temperature=1.0, max_tokens=4),
        drop_zero_variance=False,
    )


def measure(args: argparse.Namespace, backend: dict[str, str], root: Path) -> float:
    settings = {
        "ROLLGYM_ENGINE__MAX_MODEL_LEN": "512",
        "ROLLGYM_SANDBOXES__POOL_SIZE": str(args.slots),
        **backend,
    }
    with (
        ServerProcess(
            model_dir=args.model_dir, data_dir=root, settings=settings, threads=1
        ) as server,
        httpx.Client(
            base_url=server.url,
            headers={"Authorization": f"Bearer {server.admin_token}"},
            timeout=120,
        ) as http,
    ):
        return episodes_per_s(http, job(args), args.warmup, args.groups)


async def lease_phases(pool: DockerSandboxPool, leases: int) -> dict[str, float]:
    """Median ms of each phase of a lease (see the module docstring), after 5 left out."""
    times: dict[str, list[float]] = {"lease": [], "first call": [], "second call": []}
    times["release"] = []
    for n in range(leases + 5):
        marks = [time.perf_counter()]
        box = await pool.aacquire(timeout=600)
        marks.append(time.perf_counter())
        for code in ("x = 1", "x = 2"):
            await box.arun_python(code)
            marks.append(time.perf_counter())
        await pool.arelease(box)
        marks.append(time.perf_counter())
        if n >= 5:
            for phase, start, end in zip(times, marks, marks[1:], strict=False):
                times[phase].append(end - start)
    return {phase: statistics.median(t) * 1e3 for phase, t in times.items()}


def lease_table(args: argparse.Namespace, remote: RemoteHost) -> None:
    rows = {}
    for name, host in (("local", None), ("remote", remote)):
        with DockerSandboxPool(PoolConfig(size=args.slots, remote=host)) as pool:
            rows[name] = asyncio.run(lease_phases(pool, args.leases))
    print(f"\n{'a lease, median ms':<22}" + "".join(f"{p:>13}" for p in rows["local"]))
    for name, phases in rows.items():
        print(f"{'boxes ' + name:<22}" + "".join(f"{v:>13.1f}" for v in phases.values()))


def main(args: argparse.Namespace) -> None:
    backends = {"local": {"ROLLGYM_SANDBOXES__BACKEND": "local"}, "remote": remote_settings()}
    rates: dict[str, list[float]] = {name: [] for name in backends}
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-hosts-") as tmp:
        for run in range(args.runs):
            for name, backend in backends.items():
                rate = measure(args, backend, Path(tmp) / f"{name}-{run}")
                rates[name].append(rate)
                print(f"run {run + 1}: boxes {name}: {rate:.2f} episodes/s", flush=True)
    ratios = [r / loc for r, loc in zip(rates["remote"], rates["local"], strict=True)]
    runs = "  ".join(f"run {i + 1}" for i in range(args.runs))
    print(f"\n{'':<34}{runs}  median")
    for name in backends:
        cells = "  ".join(f"{r:5.2f}" for r in rates[name])
        print(f"{'episodes/s, boxes ' + name:<34}{cells}  {statistics.median(rates[name]):.2f}")
    cells = "  ".join(f"{r:4.2f}x" for r in ratios)
    print(f"{'remote / local (same run)':<34}{cells}  {statistics.median(ratios):.2f}x")
    remote = backends["remote"]
    prefix = "ROLLGYM_SANDBOXES__REMOTE__"
    lease_table(args, RemoteHost(url=remote[prefix + "URL"], cert_dir=remote[prefix + "CERT_DIR"]))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--groups", type=int, default=32, help="groups measured per server")
    parser.add_argument("--warmup", type=int, default=8, help="groups left out first")
    parser.add_argument("--env-latency", type=float, default=0.5, help="seconds per env step")
    parser.add_argument("--slots", type=int, default=4, help="the server's pool: boxes at once")
    parser.add_argument("--leases", type=int, default=30, help="leases timed per backend")
    parser.add_argument("--model-dir", type=Path, default=default_model_dir())
    main(parser.parse_args())
