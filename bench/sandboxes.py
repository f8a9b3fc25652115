"""Sandbox benchmark: one ``docker exec`` per turn (the baseline) vs the in-box executor.

    .venv/bin/python -m bench.sandboxes [--sizes 1,8,32] [--seconds 3]
    .venv/bin/python -m bench.sandboxes --images     the pool of many images (bench.image_pool)
    .venv/bin/python -m bench.sandboxes --remote-url tcp://HOST:PORT --remote-cert-dir DIR
                                                     a remote Docker host vs this one
                                                     (bench.remote_host)

Per-turn latency (p50/p90/p99) and total turns/s at each number of concurrent boxes, for
``docker exec <box> true`` (through the Docker SDK, as a naive env would) and for our
executor (a shell ``true`` and a Python statement ``x = 1``, driven by asyncio, one task
per box); then a task's checks run by the verifier (another user, the agent frozen) vs
the same tests as one shell call of the agent's, cold start, reset (vs recreating a
container), warm-up of the pool, and acquire from a warm pool. Ratios are against the
baseline measured in the same run. The Python round trip's target is the per-turn cost
the sandbox boundary may not raise: the worker's reply is read as untrusted data, and the
sockets are checked once per connection, not per call.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import uvloop

import docker
from bench import image_pool, remote_host
from rollgym.sandboxes.base import Check, Sandbox
from rollgym.sandboxes.config import PoolConfig, SandboxConfig
from rollgym.sandboxes.docker import DockerSandboxPool
from rollgym.sandboxes.docker.provider import LABEL_POOL, DockerProvider

AGENT = f"{SandboxConfig().uid}:{SandboxConfig().gid}"  # docker exec as the agent's user
TARGETS = {
    "python_p50_ms": 0.1,
    "python_vs_exec": 50.0,
    "turns_per_s_32": 5000.0,
    "reset_p50_ms": 40.0,
    "acquire_p50_ms": 1.0,
}


@dataclass
class Series:
    name: str
    boxes: int
    latencies: list[float]
    elapsed: float
    cpu_s: float | None = None  # host process + boxes' cgroups, when measurable

    @property
    def cpu_us_per_turn(self) -> float | None:
        return None if self.cpu_s is None else self.cpu_s / len(self.latencies) * 1e6

    def pct(self, q: int) -> float:
        if len(self.latencies) < 2:
            return self.latencies[0] * 1e3 if self.latencies else float("nan")
        return statistics.quantiles(self.latencies, n=100, method="inclusive")[q - 1] * 1e3

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.elapsed


def docker_exec_turns(containers: list, seconds: float) -> Series:
    latencies: list[float] = []
    lock = threading.Lock()
    stop = time.perf_counter() + seconds

    def worker(container) -> None:
        mine = []
        while time.perf_counter() < stop:
            start = time.perf_counter()
            exit_code, _ = container.exec_run(["true"], user=AGENT)
            mine.append(time.perf_counter() - start)
            assert exit_code == 0
        with lock:
            latencies.extend(mine)

    start = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(c,)) for c in containers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return Series("docker exec `true`", len(containers), latencies, time.perf_counter() - start)


def container_cpu_s(container_ids: list[str]) -> float | None:
    """CPU seconds the containers used so far (cgroup v1 cpuacct or v2 cpu.stat)."""
    total = 0.0
    for cid in container_ids:
        v1 = Path(f"/sys/fs/cgroup/cpuacct/docker/{cid}/cpuacct.usage")
        v2 = Path(f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/cpu.stat")
        if v1.is_file():
            total += int(v1.read_text()) / 1e9
        elif v2.is_file():
            usage = dict(line.split() for line in v2.read_text().splitlines())
            total += int(usage["usage_usec"]) / 1e6
        else:
            return None
    return total


async def executor_turns(
    boxes: list[Sandbox], op: str, seconds: float, container_ids: list[str]
) -> Series:
    latencies: list[float] = []
    host_before, boxes_before = time.process_time(), container_cpu_s(container_ids)
    stop = time.perf_counter() + seconds

    async def worker(box: Sandbox) -> None:
        call = box.arun_python if op == "python" else box.arun_shell
        text = "x = 1" if op == "python" else "true"
        while time.perf_counter() < stop:
            start = time.perf_counter()
            await call(text)
            latencies.append(time.perf_counter() - start)

    start = time.perf_counter()
    await asyncio.gather(*(worker(box) for box in boxes))
    elapsed = time.perf_counter() - start
    boxes_after = container_cpu_s(container_ids)
    cpu = None
    if boxes_before is not None and boxes_after is not None:
        cpu = time.process_time() - host_before + boxes_after - boxes_before
    name = "executor python `x = 1`" if op == "python" else "executor shell `true`"
    return Series(name, len(boxes), latencies, elapsed, cpu)


def timed(
    action: Callable[[], object], repeat: int, before: Callable[[], object] | None = None
) -> list[float]:
    samples = []
    for _ in range(repeat):
        if before is not None:
            before()
        start = time.perf_counter()
        action()
        samples.append(time.perf_counter() - start)
    return samples


def p50_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


def cold_starts(config: PoolConfig, repeat: int) -> tuple[list[float], list[float]]:
    """Sequential create+start+first answer, and stop+remove, of single boxes."""
    provider = DockerProvider(config)
    provider.open()
    starts, stops = [], []
    try:
        for _ in range(repeat):
            start = time.perf_counter()
            box = provider.start_box()
            starts.append(time.perf_counter() - start)
            start = time.perf_counter()
            provider.stop_box(box)
            stops.append(time.perf_counter() - start)
    finally:
        provider.close()
    return starts, stops


def print_turns(rows: list[Series], baselines: dict[int, Series]) -> None:
    print(f"{'turn':<26}{'boxes':>6}{'p50 ms':>10}{'p90 ms':>10}{'p99 ms':>10}"
          f"{'turns/s':>10}{'p50 x':>9}{'rate x':>9}{'cpu us':>9}{'cpu-bound/s':>13}")  # fmt: skip
    cores = os.cpu_count() or 1
    for row in rows:
        base = baselines[row.boxes]
        cpu = row.cpu_us_per_turn
        cpu_text = f"{cpu:>9.0f}{cores * 1e6 / cpu:>13.0f}" if cpu else f"{'-':>9}{'-':>13}"
        print(
            f"{row.name:<26}{row.boxes:>6}{row.pct(50):>10.3f}{row.pct(90):>10.3f}"
            f"{row.pct(99):>10.3f}{row.rate:>10.0f}{base.pct(50) / row.pct(50):>9.1f}"
            f"{row.rate / base.rate:>9.1f}{cpu_text}"
        )


@dataclass
class Results:
    rows: list[Series]
    baselines: dict[int, Series]
    sync_python: list[float]
    verifies: list[float]
    agent_checks: list[float]
    resets: list[float]
    acquires: list[float]
    warm_up_s: float
    starts: list[float]
    stops: list[float]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="1,8,32")
    parser.add_argument("--seconds", type=float, default=3.0, help="per measured series")
    parser.add_argument("--resets", type=int, default=40)
    parser.add_argument("--checks", type=int, default=40, help="verify calls measured")
    parser.add_argument("--cold-starts", type=int, default=8)
    parser.add_argument("--acquires", type=int, default=200)
    parser.add_argument(
        "--loop", choices=("uvloop", "asyncio"), default="uvloop", help="uvicorn runs uvloop"
    )
    parser.add_argument(
        "--images", action="store_true", help="only the row of many images (bench.image_pool)"
    )
    image_pool.add_arguments(parser)
    remote_host.add_arguments(parser)
    return parser.parse_args(argv)


def measure_turns(
    leases: list[Sandbox], containers: list, sizes: list[int], args: argparse.Namespace
) -> tuple[list[Series], dict[int, Series]]:
    rows: list[Series] = []
    baselines: dict[int, Series] = {}
    run = uvloop.run if args.loop == "uvloop" else asyncio.run
    for n in sizes:
        baselines[n] = docker_exec_turns(containers[:n], args.seconds)
        rows.append(baselines[n])
        ids = [c.id for c in containers[:n]]
        for op in ("shell", "python"):
            rows.append(run(executor_turns(leases[:n], op, args.seconds, ids)))
    return rows, baselines


CHECKS = ("test -d .", "test ! -e missing", 'test "$(cat)" = ok')


def measure_checks(box: Sandbox, repeat: int) -> tuple[list[float], list[float]]:
    """Three checks as the verifier runs them, and the same three as one agent command."""
    checks = [Check(CHECKS[0]), Check(CHECKS[1]), Check(CHECKS[2], stdin="ok")]
    as_agent = "; ".join(f"echo ok | {{ {c}; }}; echo $?" for c in CHECKS)
    return timed(lambda: box.verify(checks), repeat), timed(lambda: box.run_shell(as_agent), repeat)


def measure_reset(box: Sandbox, repeat: int) -> list[float]:
    def dirty() -> None:
        box.write_file("/work/.cache/f", "x" * 1000)
        box.run_shell("sleep 100 >/dev/null 2>&1 &")
        box.run_python("y = list(range(1000))")

    return timed(box.reset, repeat, before=dirty)


def measure_acquire(pool: DockerSandboxPool, repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        lease = pool.acquire()
        samples.append(time.perf_counter() - start)
        pool.release(lease)  # resets the box: not part of the acquire
    return samples


def measure(args: argparse.Namespace) -> Results:
    sizes = [int(s) for s in args.sizes.split(",")]
    config = PoolConfig(size=max(sizes), health_interval_s=0, acquire_timeout_s=120)
    client = docker.from_env()
    started = time.perf_counter()
    pool = DockerSandboxPool(config, client=client)
    pool.start()
    warm_up_s = time.perf_counter() - started
    try:
        leases = [pool.acquire() for _ in range(config.size)]
        filters = {"label": f"{LABEL_POOL}={pool.pool_id}"}
        by_name = {c.name: c for c in client.containers.list(filters=filters)}
        containers = [by_name[f"rollgym-sbx-{lease.id}"] for lease in leases]
        rows, baselines = measure_turns(leases, containers, sizes, args)
        sync_python = timed(lambda: leases[0].run_python("x = 1"), 2000)
        verifies, agent_checks = measure_checks(leases[0], args.checks)
        resets = measure_reset(leases[0], args.resets)
        for lease in leases:
            pool.release(lease)
        acquires = measure_acquire(pool, args.acquires)
    finally:
        pool.close()
        client.close()
    starts, stops = cold_starts(config, args.cold_starts)
    return Results(
        rows, baselines, sync_python, verifies, agent_checks, resets, acquires, warm_up_s,
        starts, stops,
    )  # fmt: skip


def check(name: str, value: float, target: str = "", met: bool | None = None) -> None:
    verdict = "" if met is None else ("yes" if met else "NO")
    print(f"{name:<44}{value:>12.3f}{target:>12}{verdict:>6}")


def report(r: Results) -> None:
    print_turns(r.rows, r.baselines)
    print(
        "p50 x / rate x: times faster / more turns per second than docker exec at the same number\n"
        "of boxes. cpu us: host process + the boxes' cgroups per turn; cpu-bound/s: the turns/s\n"
        "all cores would give at that cost (docker exec's cost is mostly in dockerd, not shown)."
    )
    smallest, top = min(r.baselines), max(r.baselines)
    python_1 = next(row for row in r.rows if row.boxes == smallest and "python" in row.name)
    python_top = next(row for row in r.rows if row.boxes == top and "python" in row.name)
    speedup = r.baselines[smallest].pct(50) / python_1.pct(50)
    t = TARGETS
    print(f"\n{'measure':<44}{'value':>12}{'target':>12}{'met':>6}")
    check(
        "python round trip, 1 box, sync, p50 ms",
        p50_ms(r.sync_python),
        f"<= {t['python_p50_ms']}",
        p50_ms(r.sync_python) <= t["python_p50_ms"],
    )
    check(
        "python round trip, 1 box, async, p50 ms",
        python_1.pct(50),
        f"<= {t['python_p50_ms']}",
        python_1.pct(50) <= t["python_p50_ms"],
    )
    check(
        "docker exec p50 / python p50, 1 box (x)",
        speedup,
        f">= {t['python_vs_exec']:.0f}",
        speedup >= t["python_vs_exec"],
    )
    check(
        f"python turns/s, {top} boxes",
        python_top.rate,
        f">= {t['turns_per_s_32']:.0f}",
        python_top.rate >= t["turns_per_s_32"],
    )
    check("verify 3 checks p50 ms (verifier, agent frozen)", p50_ms(r.verifies))
    check("verify / the same checks as the agent (x)", p50_ms(r.verifies) / p50_ms(r.agent_checks))
    check(
        "reset p50 ms (dirty box)",
        p50_ms(r.resets),
        f"<= {t['reset_p50_ms']:.0f}",
        p50_ms(r.resets) <= t["reset_p50_ms"],
    )
    check(
        "recreate (remove + cold start) / reset (x)",
        (p50_ms(r.starts) + p50_ms(r.stops)) / p50_ms(r.resets),
    )
    check(
        "acquire from a warm pool p50 ms",
        p50_ms(r.acquires),
        f"<= {t['acquire_p50_ms']}",
        p50_ms(r.acquires) <= t["acquire_p50_ms"],
    )
    check("cold start p50 ms (create+start+answer)", p50_ms(r.starts))
    check("stop + remove p50 ms", p50_ms(r.stops))
    check(f"warm-up of {top} boxes, s (parallel)", r.warm_up_s)
    check(f"{top} sequential cold starts / warm-up (x)", top * p50_ms(r.starts) / 1e3 / r.warm_up_s)  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()} at start (shared)")
    if args.images or args.remote_url:
        (image_pool if args.images else remote_host).main(args)
        print(f"\nload average {os.getloadavg()} at end")
        return
    print(f"async calls on {args.loop}\n")
    report(measure(args))
    print(f"\nload average {os.getloadavg()} at end")


if __name__ == "__main__":
    main()
