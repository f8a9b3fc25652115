"""Sandbox benchmark, the pool of many images: 64 tasks over 16 images, cold then warm.

    .venv/bin/python -m bench.sandboxes --images [--tasks 64] [--images-count 16]
        [--turns 4] [--concurrency 8] [--max-boxes 16,24]

16 task images are built offline on the local base (``rollgym tasks build``'s path: the
first run builds them, later runs find them cached), each one small folder of files. Each
task is one episode: acquire a box of its image from a Docker ``ImagePool``, ``turns``
shell commands in it, release (the reset is part of the release, not of the acquire);
``concurrency`` episodes at once on one event loop, tasks in an order that visits every
image in turn. The same 64 tasks run twice: first on an empty pool (cold: boxes start
as their images are first asked for), then again on the pool as the first pass left it
(warm); once per cap in ``--max-boxes``: a cap equal to the number of images makes every
image that ever needs a second box (episodes of one image overlap when a cold one is
slow) evict another, a roomier cap keeps the warm pass warm. Reported per pass: turns/s, acquire p50/p99
by path (warm: an idle box was there; cold: one had to start or be made room for), warm
hits, cold starts, evictions. The target is the issue's: a warm acquire of a known image
under 0.1 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import tempfile
import time
from pathlib import Path

from rollgym.envs.harbor.env import task_box
from rollgym.envs.harbor.image import image_tag
from rollgym.envs.harbor.task import read_tasks
from rollgym.sandboxes import metrics as m
from rollgym.sandboxes.config import ImagePoolConfig, SandboxConfig
from rollgym.sandboxes.docker import DockerImagePool
from rollgym.sandboxes.image_pool import ImagePool
from rollgym.sandboxes.metrics import MetricsRecorder, TimingSummary
from rollgym.tasks.build import build_tasks

WARM_ACQUIRE_TARGET_MS = 0.1


@dataclasses.dataclass(frozen=True)
class Pass:
    name: str
    max_boxes: int
    seconds: float
    turns: int
    warm: TimingSummary
    cold: TimingSummary
    warm_hits: int
    cold_starts: int
    evictions: int

    @property
    def turns_per_s(self) -> float:
        return self.turns / self.seconds


def make_tasks(root: Path, images: int) -> Path:
    """``images`` tiny Harbor tasks, each its own environment (so its own image)."""
    for index in range(images):
        task = root / f"bench-image-{index:02d}"
        (task / "environment" / "files").mkdir(parents=True, exist_ok=True)
        (task / "tests").mkdir(exist_ok=True)
        (task / "instruction.md").write_text(f"Benchmark task {index}.\n")
        (task / "task.toml").write_text('version = "1.0"\n')
        (task / "environment" / "Dockerfile").write_text(
            "FROM rollgym/base:bookworm\nWORKDIR /app\nCOPY files/ /app/\n"
        )
        (task / "environment" / "files" / "data.txt").write_text(f"image {index}\n")
        (task / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    return root


async def episode(pool: ImagePool, box: SandboxConfig, turns: int) -> int:
    view = pool.for_box(box)
    sandbox = await view.aacquire(timeout=300)
    try:
        for _ in range(turns):
            result = await sandbox.arun_shell("cat data.txt")
            assert result.ok and result.stdout.startswith("image "), result
    finally:
        await view.arelease(sandbox)
    return turns


async def run_pass(pool: ImagePool, boxes: list[SandboxConfig], args: argparse.Namespace) -> float:
    gate = asyncio.Semaphore(args.concurrency)

    async def one(box: SandboxConfig) -> int:
        async with gate:
            return await episode(pool, box, args.turns)

    start = time.perf_counter()
    await asyncio.gather(*(one(box) for box in boxes))
    return time.perf_counter() - start


class PassMetrics:
    """The pool's metrics sink, a fresh recorder for each pass."""

    def __init__(self) -> None:
        self.recorder = MetricsRecorder()

    def observe(self, name: str, seconds: float, labels: m.Labels = m.NO_LABELS) -> None:
        self.recorder.observe(name, seconds, labels)

    def increment(self, name: str, labels: m.Labels = m.NO_LABELS) -> None:
        self.recorder.increment(name, labels)


def summary(recorder: MetricsRecorder, name: str, cap: int, seconds: float, turns: int) -> Pass:
    """One pass's figures, summed or merged over the images."""
    snapshot = recorder.snapshot()

    def count(prefix: str) -> int:
        return sum(v for k, v in snapshot.items() if k.startswith(prefix) and isinstance(v, int))

    def timing(path: str) -> TimingSummary:
        found = [
            v
            for k, v in snapshot.items()
            if k.startswith(m.IMAGE_ACQUIRE)
            and f"path={path}" in k
            and isinstance(v, TimingSummary)
        ]
        return _pooled(found) if found else TimingSummary(0, 0.0, 0.0, 0.0, 0.0)

    return Pass(
        name, cap, seconds, turns, timing("warm"), timing("cold"),
        count(m.WARM_HITS), count(m.COLD_STARTS), count(m.EVICTIONS),
    )  # fmt: skip


def _pooled(summaries: list[TimingSummary]) -> TimingSummary:
    """Per-image summaries merged, conservatively: the count-weighted p50, the worst p99."""
    total = sum(s.count for s in summaries)
    p50 = sum(s.p50_s * s.count for s in summaries) / total
    return TimingSummary(
        total,
        sum(s.total_s for s in summaries),
        p50,
        max(s.p90_s for s in summaries),
        max(s.p99_s for s in summaries),
    )


def measure(args: argparse.Namespace) -> list[Pass]:
    root = make_tasks(Path(tempfile.mkdtemp(prefix="rollgym-bench-images-")), args.images_count)
    built = build_tasks(root, progress=lambda line: None)
    failed = [r for r in built if r.outcome == "failed"]
    assert not failed, failed
    tasks = read_tasks(root)
    kinds = [task_box(task, image_tag(task), SandboxConfig()) for task in tasks]
    boxes = [kinds[i % len(kinds)] for i in range(args.tasks)]  # every image in turn
    passes = []
    for cap in (int(c) for c in str(args.max_boxes).split(",")):
        sink = PassMetrics()
        config = ImagePoolConfig(max_boxes=cap, health_interval_s=0, acquire_timeout_s=300)
        with DockerImagePool(config, metrics=sink) as pool:
            for name in ("cold", "warm"):
                sink.recorder = MetricsRecorder()
                seconds = asyncio.run(run_pass(pool, boxes, args))
                passes.append(summary(sink.recorder, name, cap, seconds, args.tasks * args.turns))
    return passes


def report(passes: list[Pass], args: argparse.Namespace) -> None:
    print(
        f"{args.tasks} tasks over {args.images_count} images, {args.turns} turns each, "
        f"{args.concurrency} at once"
    )
    print(
        f"{'cap':>4} {'pass':<6}{'turns/s':>9}{'warm p50 ms':>13}{'warm p99 ms':>13}{'cold p50 ms':>13}"
        f"{'cold p99 ms':>13}{'warm hits':>11}{'cold starts':>13}{'evictions':>11}"
    )
    for p in passes:
        print(
            f"{p.max_boxes:>4} {p.name:<6}{p.turns_per_s:>9.1f}{p.warm.p50_s * 1e3:>13.3f}{p.warm.p99_s * 1e3:>13.3f}"
            f"{p.cold.p50_s * 1e3:>13.1f}{p.cold.p99_s * 1e3:>13.1f}{p.warm_hits:>11}"
            f"{p.cold_starts:>13}{p.evictions:>11}"
        )
    warm = max(p.warm.p50_s for p in passes if p.name == "warm") * 1e3
    verdict = "yes" if warm <= WARM_ACQUIRE_TARGET_MS else "NO"
    print(
        f"warm acquire of a known image p50 {warm:.3f} ms, target <= {WARM_ACQUIRE_TARGET_MS}: {verdict}"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--images-count", type=int, default=16)
    parser.add_argument("--turns", type=int, default=4, help="shell commands per task")
    parser.add_argument("--concurrency", type=int, default=8, help="episodes at once")
    parser.add_argument("--max-boxes", default="16,24", help="the pool's caps, one run each")


def main(args: argparse.Namespace) -> None:
    report(measure(args), args)
