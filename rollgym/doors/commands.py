"""``rollgym openenv-serve ENV_ID``: one registered env over OpenEnv's HTTP and WebSocket.

    rollgym openenv-serve rollgym/Compute-v0 --env-kwargs '{"digits": 5}' --port 8100 \\
        --max-sessions 8 --session-timeout 300

openenv-core's server (``rollgym.doors.openenv_server``) on uvicorn; a sandboxed env's
sessions take boxes from a Docker ``ImagePool`` of ``--max-sessions`` boxes (one per
session; Harbor tasks' images included), closed on exit. An env that cannot be made
(unknown id, refused kwargs) is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rollgym.sandboxes.base import SandboxPool


def add_openenv_command(commands: argparse._SubParsersAction) -> None:
    serve = commands.add_parser(
        "openenv-serve", help="serve one env over OpenEnv's HTTP and WebSocket interface"
    )
    serve.add_argument("env_id", help="a registered env id (or module:Env-v0)")
    serve.add_argument(
        "--env-kwargs", type=json_object, default={}, help="the env's kwargs as JSON"
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8100)
    serve.add_argument("--max-sessions", type=int, default=8, help="sessions (and boxes) at once")
    serve.add_argument(
        "--session-timeout",
        type=float,
        default=300.0,
        help="seconds a session may idle before it is closed and its box freed",
    )
    serve.set_defaults(handler=_openenv_serve)


def json_object(text: str) -> dict[str, Any]:
    """``--env-kwargs``: a JSON object, or argparse's one-line error."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"a JSON object is wanted, not {text}")
    return value


def _openenv_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from rollgym.doors.openenv_server import EnvSource, openenv_app
    from rollgym.sandboxes.base import SandboxError
    from rollgym.server.errors import ServerError

    if args.max_sessions < 1 or args.session_timeout <= 0:
        print(
            "rollgym openenv-serve: --max-sessions and --session-timeout must be > 0",
            file=sys.stderr,
        )
        return 2
    try:
        with pool_for(args.env_id, max_boxes=args.max_sessions) as pool:
            app = openenv_app(
                EnvSource(args.env_id, args.env_kwargs, pool),
                max_sessions=args.max_sessions,
                session_timeout_s=args.session_timeout,
            )
            # uvicorn re-raises the SIGTERM it stopped on once it has: exit through the
            # pool's context (its boxes removed), not by the signal's default action
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
            uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    except (ServerError, SandboxError) as exc:
        print(f"rollgym openenv-serve: {exc}", file=sys.stderr)
        return 2
    return 0


@contextlib.contextmanager
def pool_for(env_id: str, **config: Any) -> Iterator[SandboxPool | None]:
    """A Docker ``ImagePool`` (``ImagePoolConfig(**config)``) when ``env_id`` plays in a
    sandbox, else None; it serves the default box and any kind (a Harbor task's image)."""
    from rollgym.server.rollout.environments import takes_pool

    if not takes_pool(env_id):
        yield None
        return
    from rollgym.sandboxes.config import ImagePoolConfig
    from rollgym.sandboxes.docker import DockerImagePool

    with DockerImagePool(ImagePoolConfig(**config)) as pool:
        yield pool
