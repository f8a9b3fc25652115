"""Where the experiment trackers of ``report_to`` keep a run: on the local disk.

TRL hands ``report_to`` to transformers' callbacks (``TensorBoardCallback``,
``WandbCallback``, ``MLflowCallback``, ``TrackioCallback``), which read where to write from
environment variables when training starts. Left alone, W&B would ask for a login and
upload, and MLflow would write a store in the working directory. ``local_tracking`` points
them at the run's output dir for the length of one run, each variable only where the user
has not set it (``WANDB_MODE=online`` to upload, ``MLFLOW_TRACKING_URI`` for a tracking
server), and puts the environment back after, so the next run in the process gets its own.

| tracker | store | read it back |
|---|---|---|
| tensorboard | ``<output_dir>/runs/<time>_<host>`` | ``tensorboard --logdir`` |
| wandb | ``<output_dir>/wandb/offline-run-*`` (offline) | ``wandb sync`` uploads it later |
| mlflow | ``<output_dir>/mlflow.db`` (SQLite), experiment ``rollgym`` | ``mlflow ui --backend-store-uri`` |
| trackio | ``$TRACKIO_DIR/rollgym.db`` (project ``rollgym``) | ``trackio show --project rollgym`` |

trackio is the exception: it reads ``TRACKIO_DIR`` (default
``~/.cache/huggingface/trackio``) once, when it is imported, and TRL imports it with its
GRPO trainer, so it keeps every run of a process in one store; set ``TRACKIO_DIR`` before
starting the process to move it. Runs are told apart by ``run_name``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

PROJECT = "rollgym"  # W&B's project, MLflow's experiment, trackio's project


def run_name(output_dir: Path) -> str:
    """The run's name in every tracker: the output dir's last two parts (``my-run/grpo``)."""
    return "/".join(output_dir.resolve().parts[-2:])


def local_stores(output_dir: Path, trackers: Iterable[str]) -> dict[str, str]:
    """The environment that keeps W&B's and MLflow's runs under ``output_dir``."""
    chosen = set(trackers)
    env: dict[str, str] = {}
    if "wandb" in chosen:
        env |= {"WANDB_MODE": "offline", "WANDB_DIR": str(output_dir), "WANDB_PROJECT": PROJECT}
    if "mlflow" in chosen:
        env |= {
            "MLFLOW_TRACKING_URI": f"sqlite:///{output_dir.resolve() / 'mlflow.db'}",
            "MLFLOW_EXPERIMENT_NAME": PROJECT,
        }
    return env


@contextmanager
def local_tracking(output_dir: Path, trackers: Iterable[str]) -> Iterator[dict[str, str]]:
    """For one run: ``local_stores``' variables the user has not set; yields what the trackers
    see for each (the user's value where set). After the run it finishes the W&B run the
    callback started (transformers leaves it open; a run the user started stays theirs) and
    waits for W&B to write it (``wandb.teardown``), then unsets our variables."""
    chosen = set(trackers)
    wanted = local_stores(output_dir, chosen)
    wandb_run_is_ours = "wandb" in chosen and _wandb_run() is None
    ours = {name: value for name, value in wanted.items() if name not in os.environ}
    os.environ.update(ours)
    if "MLFLOW_TRACKING_URI" in ours:
        import mlflow

        # MLflowCallback keeps a tracking URI an earlier run of the process set
        mlflow.set_tracking_uri(ours["MLFLOW_TRACKING_URI"])
    if wanted:
        output_dir.mkdir(parents=True, exist_ok=True)
    try:
        yield {name: os.environ[name] for name in wanted}
    finally:
        if wandb_run_is_ours and _wandb_run() is not None:
            import wandb

            wandb.finish()
            wandb.teardown()  # the transaction log is complete on disk after this
        for name in ours:
            os.environ.pop(name, None)


def _wandb_run() -> object | None:
    import wandb

    return wandb.run
