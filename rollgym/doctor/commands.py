"""``rollgym doctor MODEL [ENV]``: the table of checks, and its verdict.

Prints one row per check (pass, fail or skip, and the reason) and exits 1 when a check
fails, 0 when none does; a model directory that holds no model, or bad ``--env-kwargs``,
is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_doctor_command(commands: argparse._SubParsersAction) -> None:
    doctor = commands.add_parser(
        "doctor", help="check a model (and an env) before a run; exit 1 if a check fails"
    )
    doctor.add_argument("model", type=Path, help="the model directory")
    doctor.add_argument("env_id", nargs="?", help="a registered env id (or module:Env-v0)")
    doctor.add_argument("--env-kwargs", default="{}", help="the env's kwargs as JSON")
    doctor.add_argument("--max-turns", type=int, help="default: the env's turn limit")
    doctor.add_argument("--max-tokens", type=int, default=64, help="sampled per turn")
    doctor.add_argument("--max-model-len", type=int, default=2048, help="the engine's context")
    doctor.add_argument("--tolerance", type=float, default=0.02, help="logprob gap allowed")
    doctor.add_argument(
        "--tool-parser",
        help="vLLM's tool parser of the model's family (the server's tool_parser setting); "
        "default: the model catalog's, else hermes",
    )
    doctor.add_argument(
        "--no-logprobs", action="store_true", help="skip the vLLM/transformers comparison"
    )
    doctor.set_defaults(handler=_doctor)


def _doctor(args: argparse.Namespace) -> int:
    from rollgym.doctor.report import DoctorConfig, doctor

    if not (args.model / "config.json").is_file():
        print(f"rollgym doctor: no model at {args.model} (no config.json)", file=sys.stderr)
        return 2
    try:
        kwargs = json.loads(args.env_kwargs)
        if not isinstance(kwargs, dict):
            raise ValueError("not a JSON object")
        config = DoctorConfig(
            model_dir=args.model,
            env_id=args.env_id,
            env_kwargs=kwargs,
            max_turns=args.max_turns,
            max_tokens=args.max_tokens,
            max_model_len=args.max_model_len,
            logprobs=not args.no_logprobs,
            tolerance=args.tolerance,
            tool_parser=args.tool_parser,
        )
    except ValueError as exc:  # pydantic's ValidationError is one too
        print(f"rollgym doctor: {exc}", file=sys.stderr)
        return 2
    report = doctor(config)
    print(report.table())
    return 0 if report.ok else 1
