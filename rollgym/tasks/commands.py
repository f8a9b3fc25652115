"""``rollgym tasks``: build and check a folder of Harbor task directories.

rollgym tasks build DIR [--map IMAGE=LOCAL ...] [--rebuild] [-v]
rollgym tasks check DIR [--jobs 2] [--max-boxes 4] [--map ...]

``build`` builds each task's image offline (``rollgym.tasks.build``); ``check`` builds
first (cached images cost nothing), then plays each task's oracle and a do-nothing agent
in real boxes and prints a table (``rollgym.tasks.check``). Exit status 0 when every task
built (and checked), 1 when one did not, 2 for bad input (no such folder, a task
directory missing a file, a bad ``--map``), with one line on stderr.
"""

from __future__ import annotations

import argparse
import sys

from rollgym.envs.harbor.task import TaskFormatError


def add_tasks_commands(commands: argparse._SubParsersAction) -> None:
    tasks = commands.add_parser("tasks", help="build and check a folder of Harbor tasks")
    actions = tasks.add_subparsers(dest="tasks_command", required=True)
    build = actions.add_parser("build", help="build every task's image, offline, cached")
    _common(build)
    build.add_argument("--rebuild", action="store_true", help="ignore the cache")
    build.add_argument("-v", "--verbose", action="store_true", help="show the engine's output")
    build.set_defaults(handler=_build)
    check = actions.add_parser(
        "check", help="each task in real boxes: the oracle earns 1, doing nothing earns 0"
    )
    _common(check)
    check.add_argument("--jobs", type=int, default=2, help="tasks checked at once")
    check.add_argument("--max-boxes", type=int, default=4, help="boxes of all images at once")
    check.set_defaults(handler=_check)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", help="a folder of task directories, or one task directory")
    parser.add_argument(
        "--map",
        action="append",
        default=[],
        metavar="IMAGE=LOCAL",
        help="build FROM the local image LOCAL where a Dockerfile names IMAGE (repeatable)",
    )


def _mapping(pairs: list[str]) -> dict[str, str]:
    mapping = {}
    for pair in pairs:
        image, sep, local = pair.partition("=")
        if not sep:
            raise ValueError(f"--map {pair!r}: write IMAGE=LOCAL")
        mapping[image.strip()] = local.strip()
    return mapping


def _build(args: argparse.Namespace) -> int:
    from rollgym.tasks.build import BuildConfig, build_tasks, summary

    try:
        config = BuildConfig(images=_mapping(args.map), rebuild=args.rebuild, verbose=args.verbose)
        results = build_tasks(args.dir, config)
    except (TaskFormatError, ValueError) as exc:
        print(f"rollgym tasks build: {exc}", file=sys.stderr)
        return 2
    print(summary(results))
    return 0 if all(r.outcome != "failed" for r in results) else 1


def _check(args: argparse.Namespace) -> int:
    from rollgym.sandboxes.config import ImagePoolConfig
    from rollgym.sandboxes.docker import DockerImagePool
    from rollgym.tasks.build import BuildConfig, build_tasks, summary
    from rollgym.tasks.check import check_tasks, table

    try:
        results = build_tasks(args.dir, BuildConfig(images=_mapping(args.map)))
        config = ImagePoolConfig(max_boxes=args.max_boxes, health_interval_s=0)
    except (TaskFormatError, ValueError) as exc:
        print(f"rollgym tasks check: {exc}", file=sys.stderr)
        return 2
    print(summary(results))
    with DockerImagePool(config) as pool:
        rows = check_tasks(args.dir, pool, jobs=args.jobs)
    print(table(rows))
    built = all(r.outcome != "failed" for r in results)
    return 0 if built and all(row.ok for row in rows) else 1
