"""``rollgym cluster ...``: N rollout servers on Ray behind one router.

    rollgym cluster up --servers 2        start them (local Ray, or --ray-address), serve the router
    rollgym cluster status [--url URL]    each server's state, version, restarts, sessions
    rollgym cluster down [--url URL]      stop the servers, Ray and the router

``up`` runs in the foreground like ``rollgym serve``: Ctrl-C (or ``down``) stops every
server, the local Ray cluster it started and the router. The admin token comes from
``ROLLGYM_ADMIN_TOKEN``; every other ``ROLLGYM_*`` variable configures the servers.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rollgym.contract.api import Route


def add_cluster_commands(commands: argparse._SubParsersAction) -> None:
    cluster = commands.add_parser(
        "cluster", help="N rollout servers on Ray behind one router"
    ).add_subparsers(dest="cluster_command", required=True)
    up = cluster.add_parser("up", help="start the servers and serve the router (foreground)")
    up.add_argument("--servers", type=int, help="rollout servers (ROLLGYM_CLUSTER__SERVERS, 2)")
    up.add_argument("--ray-address", help="an existing Ray cluster (default: start a local one)")
    up.add_argument("--host", help="the router's bind address (default 127.0.0.1)")
    up.add_argument("--port", type=int, help="the router's port (default 8000)")
    up.add_argument("--data-dir", help="servers' buffers and the staged weights")
    up.add_argument("--cpus-per-server", type=float, help="Ray resource (default 1)")
    up.add_argument("--gpus-per-server", type=float, help="Ray resource (default 0)")
    up.add_argument("--memory-per-server-gib", type=float, help="Ray resource (default 3)")
    up.add_argument("--max-restarts", type=int, help="Ray restarts a dead server (default 3)")
    up.add_argument(
        "--weights-transport",
        choices=["auto", "shared_file", "http"],
        help="auto (default): a path to servers on the router's node, an upload to others",
    )
    up.add_argument(
        "--placement",
        choices=["default", "spread"],
        help="spread: the servers on as many Ray nodes as can hold them",
    )
    up.add_argument("--log-level", default="warning", help="the router's log level")
    up.set_defaults(handler=_up)
    for name, handler, text in (
        ("status", _status, "each server's state, version and load"),
        ("down", _down, "stop the servers, Ray and the router"),
    ):
        command = cluster.add_parser(name, help=text)
        command.add_argument(
            "--url", help="the router (default http://127.0.0.1:$ROLLGYM_CLUSTER__PORT or 8000)"
        )
        command.set_defaults(handler=handler)
    scale = cluster.add_parser(
        "scale", help="add or remove servers while the cluster runs (the last ones leave)"
    )
    scale.add_argument("servers", type=int, help="how many servers the cluster should have")
    scale.add_argument(
        "--url", help="the router (default http://127.0.0.1:$ROLLGYM_CLUSTER__PORT or 8000)"
    )
    scale.set_defaults(handler=_scale)


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    keys = (
        "servers", "ray_address", "host", "port", "data_dir", "cpus_per_server",
        "gpus_per_server", "memory_per_server_gib", "max_restarts", "weights_transport",
        "placement",
    )  # fmt: skip
    return {k: getattr(args, k) for k in keys if getattr(args, k) is not None}


def _up(args: argparse.Namespace) -> int:
    import uvicorn
    from pydantic import ValidationError

    from rollgym.cluster.config import ClusterConfig
    from rollgym.cluster.router import create_router
    from rollgym.server.serve import listen

    try:
        config = ClusterConfig(
            **overrides(args), admin_token=os.environ.get("ROLLGYM_ADMIN_TOKEN", "")
        )
    except ValidationError as exc:
        print(f"rollgym cluster up: bad settings:\n{exc}")
        return 2
    try:
        listener = listen(config.host, config.port)
    except OSError as exc:
        print(f"rollgym cluster up: cannot listen on {config.host}:{config.port}: {exc.strerror}")
        return 2
    server: uvicorn.Server | None = None

    def stop() -> None:
        if server is not None:
            server.should_exit = True

    app = create_router(config, stop=stop)
    # No access log: a line per forwarded call would cost the router's hop.
    server = uvicorn.Server(uvicorn.Config(app, log_level=args.log_level, access_log=False))
    port = listener.getsockname()[1]
    print(f"rollgym cluster up: {config.servers} servers behind http://{config.host}:{port}")
    with listener:
        server.run(sockets=[listener])
    return 0 if server.started else 1


def _url(args: argparse.Namespace) -> str:
    port = os.environ.get("ROLLGYM_CLUSTER__PORT", "8000")
    return (args.url or f"http://127.0.0.1:{port}").rstrip("/")


def _headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {os.environ.get('ROLLGYM_ADMIN_TOKEN', '')}"}


def _status(args: argparse.Namespace) -> int:
    from rollgym.cluster.status import STATUS

    return _print_status(args, "status", STATUS, None, timeout_s=10)


def _scale(args: argparse.Namespace) -> int:
    """Ask the router for ``args.servers`` servers; it answers once they are up or gone (a
    server leaving drains first: up to the cluster's drain_timeout_s)."""
    from rollgym.cluster.status import SCALE

    return _print_status(args, "scale", SCALE, {"servers": args.servers}, timeout_s=3600)


def _print_status(
    args: argparse.Namespace, command: str, route: Route, body: object, timeout_s: float
) -> int:
    """Call one of the router's status routes and print the cluster's table."""
    import httpx

    from rollgym.cluster.status import ClusterStatus

    url = _url(args)
    try:
        answer = httpx.request(
            route.method, url + route.path, json=body, headers=_headers(), timeout=timeout_s
        )
    except httpx.TransportError as exc:
        print(f"rollgym cluster {command}: no router answers at {url} ({exc})")
        return 1
    if answer.status_code != 200:
        print(f"rollgym cluster {command}: {answer.status_code} {answer.text}")
        return 1
    print(ClusterStatus.model_validate_json(answer.content).table())
    return 0


def _down(args: argparse.Namespace, timeout_s: float = 300.0) -> int:
    """Ask the router to stop everything; it answers once the servers and Ray are gone."""
    import httpx

    from rollgym.cluster.status import DOWN
    from rollgym.contract import api

    url = _url(args)
    try:
        answer = httpx.post(url + DOWN.path, headers=_headers(), timeout=timeout_s)
    except httpx.ConnectError:
        print(f"rollgym cluster down: no router answers at {url}: nothing to stop")
        return 0
    if answer.status_code != 200:
        print(f"rollgym cluster down: {answer.status_code} {answer.text}")
        return 1
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            httpx.get(url + api.HEALTH.path, timeout=2)
        except httpx.TransportError:
            print("rollgym cluster down: the servers, Ray and the router are stopped")
            return 0
        time.sleep(0.5)
    print(f"rollgym cluster down: the router still answers after {timeout_s:.0f} s")
    return 1
