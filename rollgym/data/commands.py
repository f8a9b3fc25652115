"""``rollgym generate`` and ``rollgym export``: trajectories out as data sets.

rollgym generate --env rollgym/GuessNumber-v0 --episodes 1000 --group-size 4 --out DIR
                 [--model-dir DIR | --server URL] [--temperature 0.8] [--min-reward 1]
rollgym export   [--data-dir DIR | --server URL]  --out DIR  [--include-invalid]

Both filter and deduplicate the same way and write the same files (docs/data.md). What
they cannot do (a server that refuses the token or does not answer, an ``--out`` that is a
file, a data dir with no buffer) is one line on stderr and exit status 2, no traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from rollgym.contract import paths
from rollgym.contract.progress import time_left
from rollgym.data.errors import DataError

if TYPE_CHECKING:
    from rollgym.contract.wire import TrajectoryGroup
    from rollgym.data.generate import GenerateConfig
    from rollgym.data.sources import Item


def add_data_commands(commands: argparse._SubParsersAction) -> None:
    generate = commands.add_parser(
        "generate", help="sample episodes of an env and export them as a data set"
    )
    generate.add_argument("--env", required=True, help="a registered env id")
    generate.add_argument("--env-kwargs", default="{}", help="the env's kwargs as JSON")
    generate.add_argument("--episodes", type=int, required=True)
    generate.add_argument("--group-size", type=int, default=1, help="samples per task seed")
    generate.add_argument("--start-seed", type=int, default=0, help="first task seed")
    generate.add_argument("--seeds", help="comma-separated task seeds (instead of consecutive)")
    generate.add_argument("--temperature", type=float, default=1.0)
    generate.add_argument("--top-p", type=float, default=1.0)
    generate.add_argument("--max-tokens", type=int, default=64, help="per model turn")
    generate.add_argument("--max-turns", type=int)
    where = generate.add_mutually_exclusive_group()
    where.add_argument(
        "--model-dir",
        help=f"sample in-process from this model (default {paths.default_model_dir()})",
    )
    where.add_argument("--server", help="sample with this running server's rollout runner")
    generate.add_argument("--dtype", default="float32", help="in-process engine precision")
    _add_common(generate)
    generate.set_defaults(handler=_reported(_generate))

    export = commands.add_parser("export", help="write a server's archive out as a data set")
    source = export.add_mutually_exclusive_group()
    source.add_argument(
        "--data-dir",
        help=f"the server's data dir, read-only (default {paths.data_home() / 'server'})",
    )
    source.add_argument("--server", help="a running server's URL (GET /admin/archive)")
    _add_common(export)
    export.set_defaults(handler=_reported(_export))


def _reported(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """``handler`` with a ``DataError`` as one line on stderr and exit status 2."""

    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except DataError as exc:
            print(f"rollgym {args.command}: {exc}", file=sys.stderr)
            return 2

    return run


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument(
        "--format", default="dataset,parquet,jsonl", help="any of dataset, parquet, jsonl"
    )
    parser.add_argument("--token", help="admin token (default: $ROLLGYM_ADMIN_TOKEN)")
    parser.add_argument("--include-invalid", action="store_true", help="keep infra failures")
    parser.add_argument("--min-reward", type=float)
    parser.add_argument("--max-reward", type=float)
    parser.add_argument("--no-exact-dedup", action="store_true")
    parser.add_argument("--no-near-dedup", action="store_true")
    parser.add_argument("--near-threshold", type=float, default=0.8, help="Jaccard of actions")
    parser.add_argument("--near-scope", choices=("prompt", "all"), default="prompt")


def _curate_and_write(items: Iterable[Item], args: argparse.Namespace) -> int:
    from rollgym.data.curate import CurateConfig, curate
    from rollgym.data.export import FORMATS, write_export

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise DataError(f"--out {out} is a file: name a folder (it is made if missing)")
    names = [f.strip() for f in args.format.split(",") if f.strip()]
    formats = [f for f in FORMATS if f in names]
    if unknown := sorted(set(names) - set(FORMATS)):
        print(f"unknown format(s) {unknown}: choose from {', '.join(FORMATS)}")
        return 2
    config = CurateConfig(
        valid_only=not args.include_invalid,
        min_reward=args.min_reward,
        max_reward=args.max_reward,
        exact_dedup=not args.no_exact_dedup,
        near_dedup=not args.no_near_dedup,
        near_threshold=args.near_threshold,
        near_scope=args.near_scope,
    )
    rows, report = curate(items, config)
    try:
        result = write_export(rows, out, formats, report=report)
    except OSError as exc:
        raise DataError(f"cannot write the export to {out}: {exc}") from exc
    print(
        f"{report.seen} trajectories: {report.filtered} filtered, {report.exact_duplicates} exact "
        f"and {report.near_duplicates} near duplicates; {result.rows} rows written to "
        f"{result.out_dir} in {result.seconds:.1f} s"
    )
    return 0


def _token(args: argparse.Namespace) -> str:
    token = args.token or os.environ.get("ROLLGYM_ADMIN_TOKEN")
    if not token:
        raise DataError("--server needs the admin token: --token or $ROLLGYM_ADMIN_TOKEN")
    return str(token)


def _generate(args: argparse.Namespace) -> int:
    from rollgym.contract.wire import SamplingSettings
    from rollgym.data.generate import GenerateConfig

    config = GenerateConfig(
        env_id=args.env,
        env_kwargs=json.loads(args.env_kwargs),
        episodes=args.episodes,
        group_size=args.group_size,
        start_seed=args.start_seed,
        seeds=[int(s) for s in args.seeds.split(",")] if args.seeds else None,
        sampling=SamplingSettings(
            temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens
        ),
        max_turns=args.max_turns,
    )
    groups = _sample_remote(config, args) if args.server else _sample_local(config, args)
    items: list[Item] = [(t, "generated") for g in groups for t in g.trajectories]
    return _curate_and_write(items, args)


def _sample_local(config: GenerateConfig, args: argparse.Namespace) -> list[TrajectoryGroup]:
    import asyncio

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # as `rollgym serve`
    from rollgym.data.generate import generate_local
    from rollgym.engine.config import EngineConfig

    model_dir = Path(args.model_dir) if args.model_dir else paths.default_model_dir()
    engine = EngineConfig(model_dir=model_dir, dtype=args.dtype)
    return asyncio.run(generate_local(config, engine))


def _sample_remote(config: GenerateConfig, args: argparse.Namespace) -> list[TrajectoryGroup]:
    from rollgym.data.generate import generate_remote
    from rollgym.trainer.client import ServerClient
    from rollgym.trainer.config import ClientConfig

    client_config = ClientConfig(url=args.server, admin_token=_token(args))
    with ServerClient(client_config) as client:
        return generate_remote(config, client)


def _export(args: argparse.Namespace) -> int:
    from rollgym.data.sources import from_data_dir, from_server

    progress = ReadProgress()
    if args.server:
        items = from_server(
            args.server, _token(args), include_invalid=args.include_invalid, progress=progress
        )
    else:
        data_dir = Path(args.data_dir) if args.data_dir else paths.data_home() / "server"
        items = from_data_dir(data_dir, include_invalid=args.include_invalid, progress=progress)
    return _curate_and_write(items, args)


class ReadProgress:
    """An export's reading (and curating, which reads as it goes) as a counted line on
    stderr, at most every ``every_s`` and at the end: with the time left when the total is
    known (a data dir), else the rate (a server).

    >>> clock = iter([0.0, 1.0, 2.5, 3.0])
    >>> show = ReadProgress(clock=lambda: next(clock), out=sys.stdout)
    >>> show(500, 2000); show(1000, 2000); show(2000, 2000)
      read 1000/2000 archived groups, about 0m02s left
      read 2000/2000 archived groups, about 0m00s left
    """

    def __init__(
        self,
        every_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        out: TextIO = sys.stderr,
    ) -> None:
        self.every_s, self.clock, self.out = every_s, clock, out
        self.started = self._last = clock()

    def __call__(self, read: int, total: int | None) -> None:
        now = self.clock()
        if now - self._last < self.every_s and read != total:
            return
        self._last, elapsed = now, now - self.started
        if total is not None:
            line = f"{read}/{total} archived groups, {time_left(read, total, elapsed)}"
        else:
            line = f"{read} archived groups, {read / max(elapsed, 1e-9):.0f} a second"
        print(f"  read {line}", file=self.out)
