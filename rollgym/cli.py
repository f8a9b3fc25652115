"""The ``rollgym`` command: a thin dispatcher over the packages' own entry points.

Subcommands register themselves in ``_build_parser``; each handler imports its heavy
dependencies lazily, so ``rollgym --help`` stays instant.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from rollgym.audit.commands import add_audit_command
from rollgym.cluster.commands import add_cluster_commands
from rollgym.data.commands import add_data_commands
from rollgym.doctor.commands import add_doctor_command
from rollgym.doors.commands import add_openenv_command
from rollgym.evaluation.commands import add_eval_commands
from rollgym.models.commands import add_model_commands
from rollgym.run.commands import add_training_commands
from rollgym.tasks.commands import add_tasks_commands


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
    add_training_commands(commands)
    add_data_commands(commands)
    add_eval_commands(commands)
    add_audit_command(commands)
    add_doctor_command(commands)
    add_tasks_commands(commands)
    add_openenv_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    if argv is None and getattr(args, "on_tcmalloc", False):  # a command line's own process
        from rollgym.run.tcmalloc import restart_on_tcmalloc

        restart_on_tcmalloc()  # the trainers: less memory held (see rollgym.run.tcmalloc)
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
