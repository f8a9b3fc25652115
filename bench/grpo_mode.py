"""One rollgym GRPO run against a fresh child server, timed: what ``bench.trainer`` and
``bench.peers`` both measure.

    with served(warm_dir, root / "server") as client:
        timed = train_timed(run, client, warm_dir)
        timed.updates_per_min

The server is ``rollgym serve`` in its own process (``ServerProcess``) with half the cores,
the trainer this process with all of them (``CpuSplit``, as ``rollgym run`` splits them).
Rates are taken from the first optimizer step's end to the last (``steps_per_min``), so
start-up and the first batch, which no mode can overlap with training, are left out.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any


def steps_per_min(step_ends: Sequence[float]) -> float:
    """Optimizer steps per minute between the first step's end and the last's."""
    if len(step_ends) < 2:
        return float("nan")
    return 60 * (len(step_ends) - 1) / (step_ends[-1] - step_ends[0])


def tokens_per_s(
    step_ends: Sequence[float], trl_logs: Sequence[dict[str, Any]], batch: int
) -> float:
    """Model tokens of the trained batches per second, over the same window as
    ``steps_per_min`` (TRL logs each step's mean completion length over model tokens only,
    environment tokens masked out, for rollgym's trainer and TRL's alike)."""
    lengths = [
        log["completions/mean_length"] for log in trl_logs if "completions/mean_length" in log
    ]
    if len(step_ends) < 2 or len(lengths) != len(step_ends):
        return float("nan")
    return sum(lengths[1:]) * batch / (step_ends[-1] - step_ends[0])


@contextlib.contextmanager
def served(
    model_dir: Path,
    data_dir: Path,
    settings: dict[str, str] | None = None,
    threads: Any = None,
) -> Iterator[Any]:
    """A fresh ``rollgym serve`` child on ``model_dir`` and a client to it (``settings``:
    extra ``ROLLGYM_*`` variables); this process's torch gets the trainer's threads
    (``threads``: a ``CpuSplit``, default ``rollgym run``'s), pinned where it says so."""
    from rollgym.run.pipeline import CpuSplit
    from rollgym.run.server_process import ServerProcess
    from rollgym.trainer.client import ServerClient

    threads = threads or CpuSplit()
    server_cores = threads.set_up_trainer()
    server = ServerProcess(
        model_dir=model_dir,
        data_dir=data_dir,
        threads=threads.server,
        cores=server_cores,
        settings=settings,
    )
    with server, ServerClient(server.client_config()) as client:
        yield client


@dataclasses.dataclass(frozen=True)
class TimedRun:
    """A finished ``train`` call, its wall time and the load average before and after."""

    result: Any  # rollgym.trainer.loop.TrainResult
    wall_s: float
    load: tuple[float, float]
    started_at: float = 0.0  # time.time() when train was called: StepRecord.at's clock

    def elapsed_s(self, step: int) -> float:
        """Seconds from the ``train`` call to the end of optimizer step ``step`` (0: none)."""
        if step == 0:
            return 0.0
        (record,) = (r for r in self.result.records if r.step == step)
        return record.at - self.started_at

    @property
    def step_ends(self) -> list[float]:
        return [record.at for record in self.result.records]

    @property
    def updates_per_min(self) -> float:
        return steps_per_min(self.step_ends)


def train_timed(run: Any, client: Any, warm_dir: Path) -> TimedRun:
    """Train ``run`` (a ``RunConfig``) from ``warm_dir`` on the server ``client`` reaches,
    starting its rollout job once the server holds the starting weights; stop the job after."""
    from rollgym.trainer.loop import train

    load_before = os.getloadavg()[0]
    started, started_at = time.monotonic(), time.time()
    result = train(
        run.grpo,
        client,
        warm_dir,
        on_ready=lambda: client.start_rollouts(run.rollout_job()),
        printer=None,
    )
    wall = time.monotonic() - started
    client.stop_rollouts()
    return TimedRun(
        result=result, wall_s=wall, load=(load_before, os.getloadavg()[0]), started_at=started_at
    )
