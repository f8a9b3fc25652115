"""Boxes on a remote Docker host vs this machine's: the per-call round trip and a cold start.

    scripts/remote_dockerd.sh start       # a second engine here, standing in for the host
    .venv/bin/python -m bench.sandboxes --remote-url tcp://127.0.0.1:23760 \\
        --remote-cert-dir /var/lib/rollgym-remote/client [--calls 1000] [--runs 3]

Each run opens one pool of one box per backend and makes, on each box in turn, ``--calls``
sync Python calls (``x = 1``) and a fifth as many shell calls (``true``), then
``--starts`` cold starts; p50 and p99 per backend, the remote one's ratio to the local one
in the same run, and across runs the spread (lowest-highest). A local call is a frame
each way on a unix socket; a remote one goes through the engine's TLS connection and a
relay in the box (``sandboxes.docker.relay``).
"""

from __future__ import annotations

import argparse
import statistics

from bench.sandboxes import cold_starts, timed
from rollgym.sandboxes.config import PoolConfig, RemoteHost
from rollgym.sandboxes.docker import DockerSandboxPool

BACKENDS = ("local", "remote")
MEASURES = ("python x = 1", "shell true", "cold start")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--remote-url", help="a remote engine's TLS listener: only that row")
    parser.add_argument("--remote-cert-dir", help="its ca.pem, cert.pem and key.pem")
    parser.add_argument("--calls", type=int, default=1000, help="Python calls per backend")
    parser.add_argument("--starts", type=int, default=5, help="cold starts per backend")
    parser.add_argument("--runs", type=int, default=3)


def _config(name: str, remote: RemoteHost) -> PoolConfig:
    return PoolConfig(size=1, health_interval_s=0, remote=remote if name == "remote" else None)


def _pct_ms(samples: list[float], q: int) -> float:
    if len(samples) == 1:
        return samples[0] * 1e3
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1] * 1e3


def one_run(remote: RemoteHost, args: argparse.Namespace) -> dict[tuple[str, str], list[float]]:
    """Samples per (backend, measure), the backends' calls interleaved per box."""
    pools = {name: DockerSandboxPool(_config(name, remote)) for name in BACKENDS}
    samples: dict[tuple[str, str], list[float]] = {}
    try:
        for pool in pools.values():
            pool.start()
        boxes = {name: pool.acquire() for name, pool in pools.items()}
        for _ in range(10):  # each box's connections made, not part of a call
            for box in boxes.values():
                box.run_python("x = 1")
                box.run_shell("true")
        for name in BACKENDS:
            samples[name, "python x = 1"] = []
            samples[name, "shell true"] = []
        for _ in range(10):  # in slices, so both backends see the same load
            for name, box in boxes.items():
                python = timed(lambda box=box: box.run_python("x = 1"), args.calls // 10)
                shell = timed(lambda box=box: box.run_shell("true"), args.calls // 50)
                samples[name, "python x = 1"] += python
                samples[name, "shell true"] += shell
        for name, pool in pools.items():
            pool.release(boxes[name])
    finally:
        for pool in pools.values():
            pool.close()
    for name in BACKENDS:
        samples[name, "cold start"] = cold_starts(_config(name, remote), args.starts)[0]
    return samples


def main(args: argparse.Namespace) -> None:
    if not args.remote_cert_dir:
        raise SystemExit("--remote-url needs --remote-cert-dir (ca.pem, cert.pem, key.pem)")
    remote = RemoteHost(url=args.remote_url, cert_dir=args.remote_cert_dir)
    runs = []
    for run in range(args.runs):
        runs.append(one_run(remote, args))
        print(f"run {run + 1} of {args.runs} done")
    print(f"\n{'measure':<16}{'q':>5}{'local ms':>28}{'remote ms':>28}{'remote/local':>22}")
    for measure in MEASURES:
        for q in (50, 99):
            local = [_pct_ms(r["local", measure], q) for r in runs]
            remote_ms = [_pct_ms(r["remote", measure], q) for r in runs]
            ratios = [b / a for a, b in zip(local, remote_ms, strict=True)]
            print(
                f"{measure:<16}{'p' + str(q):>5}{_spread(local, '.3f'):>28}"
                f"{_spread(remote_ms, '.3f'):>28}{_spread(ratios, '.2f', 'x'):>22}"
            )
    print(
        f"\nmedian of {args.runs} runs [lowest-highest]; {args.calls} Python and "
        f"{args.calls // 5} shell calls, {args.starts} cold starts per backend and run"
    )


def _spread(values: list[float], fmt: str, unit: str = "") -> str:
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{mid:{fmt}}{unit} [{low:{fmt}}-{high:{fmt}}]"
