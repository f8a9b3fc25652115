"""The ``rollgym`` command: a thin dispatcher over the packages' own entry points.

Subcommands register themselves in ``_build_parser``; each handler imports its heavy
dependencies lazily, so ``rollgym --help`` stays instant.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from rollgym.cluster.commands import add_cluster_commands
from rollgym.contract import paths
from rollgym.data.commands import add_data_commands
from rollgym.models.commands import add_model_commands
from rollgym.precision.commands import add_eval_commands


def _run(args: argparse.Namespace) -> int:
    """The built-in default: warm start, server, GRPO, evaluation, report (resumable)."""
    import json
    import shutil
    import warnings

    # TRL warns at import that it was tested with older vLLM versions; the trainer never
    # uses TRL's vLLM integration (see trainer/grpo.py).
    warnings.filterwarnings("ignore", message="TRL currently supports vLLM", category=UserWarning)
    import datasets
    from transformers.utils import logging as hf_logging

    from rollgym.run.pipeline import RunConfig, run_default
    from rollgym.trainer.config import parse_config

    hf_logging.disable_progress_bar()
    datasets.disable_progress_bars()
    values = json.loads(Path(args.config).read_text()) if args.config else {}
    if args.run_dir:
        values["run_dir"] = args.run_dir
    if args.eval_episodes is not None:
        values["eval_episodes"] = args.eval_episodes
    if args.server:
        values["server_url"] = args.server
    if args.servers is not None:
        values["servers"] = args.servers
    trainer = {"total_steps": args.steps, "max_staleness": args.max_staleness}
    if trainer := {k: v for k, v in trainer.items() if v is not None}:
        base = parse_config(RunConfig, **values).trainer.model_dump()
        values["trainer"] = base | values.get("trainer", {}) | trainer
    config = parse_config(RunConfig, **values)
    if args.restart:
        shutil.rmtree(config.run_dir, ignore_errors=True)
    try:
        report = run_default(config)
    except KeyboardInterrupt:
        print(f"\ninterrupted: run the same command again to resume from {config.run_dir}")
        return 130
    print(f"done in {report.wall_s / 60:.1f} min: {report.report_png}, {report.summary_json}")
    return 0


def _train(args: argparse.Namespace) -> int:
    """GRPO against a rollout server that is already running (its job, or one we start)."""
    import json
    import os

    from rollgym.trainer.client import ServerClient
    from rollgym.trainer.config import ClientConfig, TrainerConfig, parse_config
    from rollgym.trainer.loop import train

    values = json.loads(Path(args.config).read_text()) if args.config else {}
    values["output_dir"] = args.output_dir
    for key in ("total_steps", "max_staleness", "group_size", "groups_per_batch"):
        if getattr(args, key) is not None:
            values[key] = getattr(args, key)
    config = parse_config(TrainerConfig, **values)
    token = args.token or os.environ.get("ROLLGYM_ADMIN_TOKEN")
    client_config = parse_config(ClientConfig, url=args.server, admin_token=token)
    with ServerClient(client_config) as client:
        result = train(config, client, Path(args.model))
    print(f"trained {result.steps} steps; the server is at policy version {result.policy_version}")
    return 0


def _add_training_commands(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser(
        "run", help="the main job: a real RL run on the default model (resumable)"
    )
    run.add_argument("--config", help="JSON file of trainer.pipeline.RunConfig fields")
    run.add_argument(
        "--run-dir", help=f"outputs and checkpoints (default {paths.runs_dir()}/default)"
    )
    run.add_argument("--steps", type=int, help="GRPO optimizer steps (default: the built-in run's)")
    run.add_argument(
        "--max-staleness", type=int, help="0: synchronous; >= 1: asynchronous (default 1)"
    )
    run.add_argument("--eval-episodes", type=int, help="held-out episodes per policy (0: skip)")
    run.add_argument(
        "--server", help="train against this running server (token: $ROLLGYM_ADMIN_TOKEN)"
    )
    run.add_argument(
        "--servers", type=int, help="rollout servers (default 1; more: a Ray cluster and router)"
    )
    run.add_argument("--restart", action="store_true", help="delete the run dir and start over")
    run.set_defaults(handler=_run)

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
    train.set_defaults(handler=_train)


def _serve(args: argparse.Namespace) -> int:
    from rollgym.server.serve import serve

    return serve(args)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rollgym", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    add_model_commands(commands)

    from rollgym.server.serve import add_arguments

    serve = commands.add_parser("serve", help="run the rollout server (vLLM, buffer, runner)")
    add_arguments(serve)
    serve.set_defaults(handler=_serve)
    add_cluster_commands(commands)
    _add_training_commands(commands)
    add_data_commands(commands)
    add_eval_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
