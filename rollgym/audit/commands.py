"""``rollgym audit ENV_ID [--env-kwargs JSON] [--episodes N]``: the table, and its verdict.

Prints one row per attack (attempts, crossings) and each crossing's evidence, and exits
1 on any crossing, 0 on none. An env that cannot be made (unknown id, kwargs its
constructor refuses, no Docker for a sandboxed one) is one line on stderr and exit
status 2. A sandboxed env plays on a one-box Docker pool of the audit's own, so that
every episode after the first reuses a box another episode had (what residue needs): an
``ImagePool`` capped at one box, which serves the default box and a kind of its own (a
Harbor task's image, a data set's verifier folders) alike.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rollgym.audit.suite import Row

EVIDENCE_LINES = 3  # per attack


def add_audit_command(commands: argparse._SubParsersAction) -> None:
    audit = commands.add_parser(
        "audit", help="try the attack suite on an env; exit 1 if anything crosses"
    )
    audit.add_argument("env_id", help="a registered env id (or module:Env-v0)")
    audit.add_argument("--env-kwargs", default="{}", help="the env's kwargs as JSON")
    audit.add_argument(
        "--episodes", type=int, default=2, help="times each attack plays (seeds 0..N-1)"
    )
    audit.set_defaults(handler=_audit)


def _audit(args: argparse.Namespace) -> int:
    from rollgym.audit.suite import audit
    from rollgym.doors.commands import pool_for
    from rollgym.sandboxes.base import SandboxError
    from rollgym.server.errors import ServerError

    try:
        kwargs = json.loads(args.env_kwargs)
        if not isinstance(kwargs, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        print(f"rollgym audit: --env-kwargs must be a JSON object: {exc}", file=sys.stderr)
        return 2
    if args.episodes < 1:
        print("rollgym audit: --episodes must be at least 1", file=sys.stderr)
        return 2
    try:
        with pool_for(args.env_id, max_boxes=1, health_interval_s=0) as pool:
            rows = audit(args.env_id, kwargs, args.episodes, pool=pool)
    except (ServerError, SandboxError) as exc:
        print(f"rollgym audit: {exc}", file=sys.stderr)
        return 2
    print(table(args.env_id, args.episodes, rows))
    return 1 if any(row.crossings for row in rows) else 0


def table(env_id: str, episodes: int, rows: Sequence[Row]) -> str:
    """The audit's report: a row per attack, then each crossing's evidence.

    >>> from rollgym.audit.suite import Row
    >>> print(table("x/Y-v0", 1, [Row("residue", 3, ()), Row("crashes", 9, ("a: b",))]))
    rollgym audit x/Y-v0 (1 episode per attack)
    attack   attempts  crossed
    residue         3        0
    crashes         9        1
      - a: b
    1 crossing
    """
    width = max(len("attack"), *(len(row.attack) for row in rows))
    plural = "" if episodes == 1 else "s"
    lines = [
        f"rollgym audit {env_id} ({episodes} episode{plural} per attack)",
        f"{'attack':<{width}}  attempts  crossed",
    ]
    lines += [f"{r.attack:<{width}}  {r.attempts:>8}  {len(r.crossings):>7}" for r in rows]
    for row in rows:
        lines += [f"  - {c}" for c in row.crossings[:EVIDENCE_LINES]]
        if len(row.crossings) > EVIDENCE_LINES:
            lines.append(f"  - (and {len(row.crossings) - EVIDENCE_LINES} more of {row.attack})")
    crossed = sum(len(row.crossings) for row in rows)
    lines.append("no crossing" if not crossed else f"{crossed} crossing{'s' * (crossed > 1)}")
    return "\n".join(lines)
