"""``rollgym serve``: the real server (vLLM engine, buffer, runner) on uvicorn.

Flags override ``ROLLGYM_*`` environment variables, which override defaults (see
``server.config``). The admin token should come from the environment
(``ROLLGYM_ADMIN_TOKEN``): a flag shows up in the process list.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import threading
from typing import Any

from pydantic import ValidationError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", help="bind address (ROLLGYM_HOST, default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (ROLLGYM_PORT, default 8000; 0: any)")
    parser.add_argument("--model-dir", help="model directory (ROLLGYM_ENGINE__MODEL_DIR)")
    parser.add_argument("--admin-token", help="admin bearer token (prefer ROLLGYM_ADMIN_TOKEN)")
    parser.add_argument("--data-dir", help="buffer and staged weights (ROLLGYM_DATA_DIR)")
    parser.add_argument(
        "--sandbox-pool-size", type=int, help="warm sandboxes (ROLLGYM_SANDBOXES__POOL_SIZE)"
    )
    parser.add_argument(
        "--in-flight",
        choices=["finish", "abort"],
        help="requests running at a weight update (ROLLGYM_ENGINE__IN_FLIGHT)",
    )
    parser.add_argument("--log-level", default="info", help="uvicorn's log level")
    parser.add_argument(
        "--parent-pipe",
        type=int,
        metavar="FD",
        help="stop (as on SIGTERM) when this inherited pipe closes: the process that started "
        "the server and holds the pipe's other end is gone, even if it was killed with -9",
    )


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the flags give (nested per component)."""
    flat = {
        "host": args.host,
        "port": args.port,
        "admin_token": args.admin_token,
        "data_dir": args.data_dir,
    }
    out: dict[str, Any] = {k: v for k, v in flat.items() if v is not None}
    engine = {"model_dir": args.model_dir, "in_flight": args.in_flight}
    if engine := {k: v for k, v in engine.items() if v is not None}:
        out["engine"] = engine
    if args.sandbox_pool_size is not None:
        out["sandboxes"] = {"pool_size": args.sandbox_pool_size}
    return out


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from rollgym.server.app import create_app
    from rollgym.server.config import ServerSettings

    # vLLM on CPU: keep the worker inside the engine process (one process fewer per call).
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    try:
        settings = ServerSettings(**overrides(args))
    except ValidationError as exc:
        print(f"rollgym serve: bad settings:\n{exc}")
        return 2
    try:
        listener = listen(settings.host, settings.port)
    except OSError as exc:
        print(
            f"rollgym serve: cannot listen on {settings.host}:{settings.port}: {exc.strerror}. "
            "Is another server running there? Stop it or pick another --port."
        )
        return 2
    if args.parent_pipe is not None:
        stop_when_parent_dies(args.parent_pipe)
    server = uvicorn.Server(uvicorn.Config(create_app(settings), log_level=args.log_level))
    with listener:
        server.run(sockets=[listener])
    return 0 if server.started else 1


def listen(host: str, port: int) -> socket.socket:
    """Bind the server's socket before the engine loads, so a busy port fails in a second,
    not after the model is up; uvicorn then serves on this very socket (no race)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(2048)
    except OSError:
        listener.close()
        raise
    return listener


def stop_when_parent_dies(fd: int) -> None:
    """Send ourselves SIGTERM, the graceful stop (boxes removed, buffer closed), once the
    pipe ``fd`` reads end-of-file: the kernel closes its write end when the parent that
    holds it exits, however it exits. A parent killed with -9 gets no chance to stop us."""

    def watch() -> None:
        with os.fdopen(fd, "rb", buffering=0) as pipe:
            while pipe.read(1):
                pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-pipe", daemon=True).start()
