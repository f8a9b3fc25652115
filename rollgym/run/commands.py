"""``rollgym run`` (the built-in run, or a preset) and ``rollgym train`` (GRPO against a
running server).

    rollgym run                      the default: warm start, server, GRPO, eval, report
    rollgym run --preset smollm2     the same on SmolLM2-135M-Instruct (no warm start)
    rollgym run --config my.json     any RunConfig fields, over the preset
    rollgym train --server URL --model DIR --output-dir DIR
"""

from __future__ import annotations

import argparse
import contextlib
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

from rollgym.contract import paths
from rollgym.run.flags import USAGE, add_run_flags, flag_layer, layered, preset_base
from rollgym.run.presets import PRESETS
from rollgym.trainer.config import Tracker
from rollgym.trainer.errors import TrainerConfigError


def add_training_commands(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser(
        "run",
        help="the main job: a real RL run of an agent in sandboxes, or your env and model (resumable)",
        description="Train a policy with GRPO against a rollout server it starts: warm start,\n"
        "server, GRPO, held-out evaluation, report.png and summary.json, all under the run\n"
        "dir. Interrupted, the same command resumes.",
        epilog=USAGE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_run_flags(run)
    setup = run.add_argument_group("config and run")
    setup.add_argument(
        "--preset", choices=sorted(PRESETS), default="default", help="a named starting config"
    )
    setup.add_argument(
        "--config",
        metavar="JSON",
        help="a file of rollgym.run.pipeline.RunConfig fields, layered over the preset "
        "(name only what you change)",
    )
    setup.add_argument(
        "--run-dir",
        metavar="DIR",
        help=f"outputs and checkpoints (default {paths.runs_dir()}/<preset>, or "
        "<env>-<model> for another env or model)",
    )
    setup.add_argument(
        "--eval-episodes", type=int, metavar="N", help="held-out episodes per policy (0: skip)"
    )
    setup.add_argument(
        "--server",
        metavar="URL",
        help="train against this running server (token: $ROLLGYM_ADMIN_TOKEN)",
    )
    setup.add_argument(
        "--servers",
        type=int,
        metavar="N",
        help="rollout servers (default 1; more: a Ray cluster and router)",
    )
    setup.add_argument("--restart", action="store_true", help="delete the run dir and start over")
    setup.add_argument(
        "--no-doctor", action="store_true", help="skip rollgym doctor's checks before the run"
    )
    run.set_defaults(handler=_run, on_tcmalloc=True)  # see rollgym.run.tcmalloc

    train = commands.add_parser("train", help="GRPO against a running rollout server")
    train.add_argument("--server", required=True, help="the server's base URL")
    train.add_argument("--model", required=True, help="model directory to start from")
    train.add_argument("--output-dir", required=True, help="checkpoints and step log")
    train.add_argument("--token", help="admin token (default: $ROLLGYM_ADMIN_TOKEN)")
    train.add_argument("--config", help="JSON file of trainer.config.TrainerConfig fields")
    train.add_argument("--total-steps", type=int)
    train.add_argument("--max-staleness", type=int)
    train.add_argument("--group-size", type=int)
    train.add_argument("--groups-per-batch", type=int)
    train.add_argument(
        "--report-to",
        action="append",
        choices=get_args(Tracker),
        help="log the per-step series to this tracker too, kept under <output_dir> "
        "(tensorboard: runs/, wandb: wandb/ offline, mlflow: mlflow.db; trackio: $TRACKIO_DIR)",
    )
    train.add_argument(
        "--wait-s",
        type=float,
        help="how long a step waits for trainable groups before the run gives up (default 600)",
    )
    train.set_defaults(handler=_train, on_tcmalloc=True)


def run_config_values(args: argparse.Namespace) -> dict[str, Any]:
    """The layers of ``rollgym run``'s config, merged (``rollgym.run.flags.layered``)."""
    base = preset_base(args.preset)
    from_file = _config_file(args.config) if args.config else {}
    return layered(base, from_file, flag_layer(args))


def _config_file(path: str) -> dict[str, Any]:
    import json

    try:
        values = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise TrainerConfigError(f"--config {path}: {exc}") from None
    if not isinstance(values, dict):
        raise TrainerConfigError(f"--config {path}: a JSON object of RunConfig fields, please")
    return values


def _run(args: argparse.Namespace) -> int:
    """The built-in default: warm start, server, GRPO, evaluation, report (resumable)."""
    import shutil
    import sys
    import warnings

    # TRL warns at import that it was tested with older vLLM versions; the trainer never
    # uses TRL's vLLM integration (see trainer/grpo.py).
    warnings.filterwarnings("ignore", message="TRL currently supports vLLM", category=UserWarning)
    from rollgym.trainer.trl_without_vllm import import_trl_without_vllm

    import_trl_without_vllm()  # the trainer here never samples with TRL's vLLM
    import datasets
    from transformers.utils import logging as hf_logging

    from rollgym.doctor.report import DoctorFailed
    from rollgym.run.pipeline import RunConfig, run_default
    from rollgym.trainer.config import parse_config

    hf_logging.disable_progress_bar()
    datasets.disable_progress_bars()
    try:
        config = parse_config(RunConfig, **run_config_values(args))
    except TrainerConfigError as exc:
        print(f"rollgym run: {exc}", file=sys.stderr)
        return 2
    if args.restart:
        shutil.rmtree(config.run_dir, ignore_errors=True)
    try:
        with sigterm_as_interrupt():
            report = run_default(config, doctor=not args.no_doctor)
    except TrainerConfigError as exc:  # found once the run looks: no model, no env...
        print(f"rollgym run: {exc}", file=sys.stderr)
        return 2
    except DoctorFailed:  # its table is printed: what failed, and why
        print("rollgym run: a doctor check failed; fix it, or run with --no-doctor")
        return 1
    except KeyboardInterrupt:
        print(f"\ninterrupted: run the same command again to resume from {config.run_dir}")
        return 130
    print(f"done in {report.wall_s / 60:.1f} min: {report.report_png}, {report.summary_json}")
    return 0


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (a job scheduler's stop, ``kill``) ends the block as Ctrl-C does: the run
    stops its server and boxes on the way out, where the default action would leave them
    running with nobody to stop them."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _train(args: argparse.Namespace) -> int:
    """GRPO against a rollout server that is already running (``rollgym.run.train_command``)."""
    import json
    import os
    import sys

    from rollgym.trainer.trl_without_vllm import import_trl_without_vllm

    import_trl_without_vllm()  # the trainer here never samples with TRL's vLLM
    from rollgym.run.train_command import train_on_server
    from rollgym.trainer.client import ServerClient
    from rollgym.trainer.config import ClientConfig, TrainerConfig, parse_config

    values = json.loads(Path(args.config).read_text()) if args.config else {}
    values["output_dir"] = args.output_dir
    for key in ("total_steps", "max_staleness", "group_size", "groups_per_batch", "report_to"):
        if getattr(args, key) is not None:
            values[key] = getattr(args, key)
    if args.wait_s is not None:
        values["stall_timeout_s"] = args.wait_s
    try:
        config = parse_config(TrainerConfig, **values)
    except TrainerConfigError as exc:
        print(f"rollgym train: {exc}", file=sys.stderr)
        return 2
    token = args.token or os.environ.get("ROLLGYM_ADMIN_TOKEN")
    client_config = parse_config(ClientConfig, url=args.server, admin_token=token)
    with ServerClient(client_config) as client:
        return train_on_server(config, client, Path(args.model))
