"""The ``rollgym`` command: a thin dispatcher over the packages' own entry points.

Subcommands register themselves in ``_build_parser``; each handler imports its heavy
dependencies lazily, so ``rollgym --help`` stays instant.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from rollgym import paths


def _model_init(args: argparse.Namespace) -> int:
    from rollgym.model_factory import ModelSpec, build_model, count_parameters, is_built

    spec = ModelSpec(seed=args.seed)
    out = Path(args.out) if args.out else paths.default_model_dir()
    if is_built(spec, out) and not args.force:
        print(f"model: {out} is up to date")
        return 0
    build_model(spec, out)
    print(f"model: built {out} ({count_parameters(out) / 1e6:.2f}M parameters, seed {spec.seed})")
    return 0


def _model_path(args: argparse.Namespace) -> int:
    print(paths.default_model_dir())
    return 0


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rollgym", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    model = commands.add_parser("model", help="the default model").add_subparsers(
        dest="model_command", required=True
    )
    init = model.add_parser("init", help="build the default model locally (idempotent)")
    init.add_argument("--seed", type=int, default=0, help="weight and corpus seed (default 0)")
    init.add_argument("--out", help=f"target directory (default {paths.default_model_dir()})")
    init.add_argument("--force", action="store_true", help="rebuild even if up to date")
    init.set_defaults(handler=_model_init)
    model.add_parser("path", help="print the default model's directory").set_defaults(
        handler=_model_path
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
