"""``rollgym train``'s body: GRPO against a server that is already running.

Before any step it checks the server's rollout job has the run's shape and plans the start
(``rollgym.trainer.preflight``: no push when the server serves the starting weights, a line
for each trap ahead); afterwards a run that trained no step exits non-zero. Exit codes:
0 trained, 1 trained nothing (starved, or the output dir's run was already over), 2 the
server's job and the run disagree.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from rollgym.trainer.checkpoint import latest_checkpoint, read_state
from rollgym.trainer.client import ServerClient
from rollgym.trainer.config import TrainerConfig
from rollgym.trainer.errors import StarvedError
from rollgym.trainer.loop import train
from rollgym.trainer.preflight import plan_start


def train_on_server(
    config: TrainerConfig,
    client: ServerClient,
    model: Path,
    *,
    printer: Callable[[str], object] = print,
) -> int:
    """Train ``model`` against ``client``'s server; the exit code (module docstring)."""

    def fail(line: str) -> None:
        print(f"rollgym train: {line}", file=sys.stderr)

    status = client.rollouts()  # the server's job, if one runs, must have our shape
    job = status.job if status.running else None
    if job is not None and (differences := config.differences(job)):
        fail(
            f"the server's rollout job has another shape ({'; '.join(differences)}): train "
            "with the job's shape (--group-size, --groups-per-batch, --max-staleness) or "
            "stop the job"
        )
        return 2
    checkpoint = latest_checkpoint(config.output_dir)
    resumed_step = read_state(checkpoint).step if checkpoint is not None else None
    plan = plan_start(
        config, model=model, policy=client.policy(), rollouts=status, resumed_step=resumed_step
    )
    if plan.refusal is not None:
        fail(plan.refusal)
        return 1
    for note in plan.notes:
        printer(f"note: {note}")
    try:
        result = train(config, client, model, printer=printer, starts_served=not plan.push_start)
    except StarvedError as exc:
        fail(f"{exc}; steps done are checkpointed in {config.output_dir}")
        return 1
    trained = result.steps - (resumed_step or 0)
    printer(
        f"trained {trained} steps (to step {result.steps}); the server is at policy version "
        f"{result.policy_version}"
    )
    return 0 if trained > 0 else 1
