"""The executor: serves shell, Python, file and reset requests on a unix socket.

Run inside a box as ``python3 -m agent.executor --socket /run/rollgym/executor.sock
--contained ...`` (``--contained`` lets reset kill every other process, which is only
safe when an init is our parent in a container), or on the host by the fake sandbox.

Requests and replies are frames (``framing``); one request is served at a time, from any
number of host connections. Every request names an ``op``::

    ping                           -> {ok, pid}
    shell  {command, timeout, cap} -> {ok, exit_code, stdout, stderr, truncated,
                                        duration_s, timed_out, oom}
    python_exit {cap}              -> the same, for a Python call the host lost
    write  {path, data (base64)}   -> {ok}
    read   {path, max_bytes}       -> {ok, data (base64)}
    reset                          -> {ok, duration_s}

Python calls go to the Python worker's own socket (``pyworker``), with the same request
and reply as ``shell`` (``{op: python, code, timeout, cap}``).

A failed request answers ``{ok: false, error: bad_request | file | reset_failed, message}``.
The socket appears (atomically, by rename) only once the executor is listening.
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import socket
import stat
import sys
import time
from collections.abc import Callable
from typing import Any

from .framing import Message
from .processes import (
    group_alive,
    kill_everything_else,
    kill_group,
    oom_kill_count,
    reap_children,
)
from .pyworker import PythonWorker
from .result import CallResult
from .server import listen, serve
from .shell import run_shell

OOM_EXIT_CODE = 137  # 128 + SIGKILL: how the OOM killer's victims exit
PYTHON_SOCKET_NAME = "python.sock"


class RequestError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class Executor:
    """Request handlers and the box's in-executor state (Python worker, process groups)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.worker = PythonWorker(args.python_socket, args.work_dir, args.python_grace)
        self.groups: set[int] = set()  # shell process groups that may still hold processes
        self.oom_seen = self._oom_count()
        self.handlers: dict[str, Callable[[Message, socket.socket | None], Message]] = {
            "ping": lambda req, host: {"ok": True, "pid": os.getpid()},
            "shell": self.shell,
            "python_exit": self.python_exit,
            "write": self.write,
            "read": self.read,
            "reset": self.reset,
        }

    def handle(self, request: Message, host: socket.socket | None) -> Message:
        handler = self.handlers.get(str(request.get("op")))
        try:
            if handler is None:
                raise RequestError("bad_request", f"unknown op {request.get('op')!r}")
            return handler(request, host)
        except RequestError as exc:
            return {"ok": False, "error": exc.kind, "message": str(exc)}
        except (KeyError, TypeError, ValueError) as exc:
            return {"ok": False, "error": "bad_request", "message": f"{type(exc).__name__}: {exc}"}

    def shell(self, req: Message, host: socket.socket | None) -> Message:
        result, pgid = run_shell(
            req["command"],
            shell=self.args.shell,
            cwd=self.args.work_dir,
            timeout=float(req["timeout"]),
            cap=int(req["cap"]),
            host=host,
        )
        if pgid is not None:
            self.groups.add(pgid)
        # Forget groups with no process left: their ids may be reused (on a host, by others).
        self.groups = {group for group in self.groups if group_alive(group)}
        return self._with_oom(result).to_message()

    def python_exit(self, req: Message, host: socket.socket | None) -> Message:
        """The host lost a Python call: report how the worker ended, start a fresh one."""
        result = self._with_oom(self.worker.end_report(int(req["cap"])))
        self.worker.start()
        return result.to_message()

    def _oom_count(self) -> int:
        """The box's cgroup oom_kill counter (only in a container: on a host it is not ours)."""
        return (oom_kill_count() or 0) if self.args.contained else 0

    def _with_oom(self, result: CallResult) -> CallResult:
        """Mark a SIGKILLed call as OOM when the cgroup's oom_kill counter moved."""
        if result.exit_code == OOM_EXIT_CODE and not result.timed_out:
            count = self._oom_count()
            result.oom = count > self.oom_seen
            self.oom_seen = count
        return result

    def _path(self, req: Message) -> str:
        return os.path.join(self.args.work_dir, str(req["path"]))

    def write(self, req: Message, host: socket.socket | None) -> Message:
        path = self._path(req)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(base64.b64decode(req["data"]))
        except OSError as exc:
            raise RequestError("file", f"cannot write {req['path']}: {exc.strerror}") from exc
        return {"ok": True}

    def read(self, req: Message, host: socket.socket | None) -> Message:
        path, limit = self._path(req), int(req["max_bytes"])
        try:
            with open(path, "rb") as f:
                if os.fstat(f.fileno()).st_size > limit:
                    raise RequestError("file", f"{req['path']} is larger than {limit} bytes")
                data = f.read(limit + 1)
        except OSError as exc:
            raise RequestError("file", f"cannot read {req['path']}: {exc.strerror}") from exc
        if len(data) > limit:
            raise RequestError("file", f"{req['path']} is larger than {limit} bytes")
        return {"ok": True, "data": base64.b64encode(data).decode()}

    def reset(self, req: Message, host: socket.socket | None) -> Message:
        start = time.monotonic()
        self.worker.stop()
        for pgid in self.groups:
            kill_group(pgid)
        self.groups.clear()
        try:
            if self.args.contained:
                kill_everything_else()
            reap_children()
            for folder in self.args.wipe:
                wipe(folder)
        except (OSError, TimeoutError) as exc:
            raise RequestError("reset_failed", str(exc)) from exc
        self.worker.start()
        self.oom_seen = self._oom_count()
        return {"ok": True, "duration_s": time.monotonic() - start}


def _make_writable_and_retry(func: Callable[[str], Any], path: str, exc_info: Any) -> None:
    parent = os.path.dirname(path)
    os.chmod(parent, os.stat(parent).st_mode | stat.S_IRWXU)
    if os.path.isdir(path) and not os.path.islink(path):
        os.chmod(path, stat.S_IRWXU)
        shutil.rmtree(path)
    else:
        func(path)


def wipe(folder: str) -> None:
    """Remove everything inside ``folder`` (a mount point, so the folder itself stays)."""
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                os.chmod(entry.path, stat.S_IRWXU)
                shutil.rmtree(entry.path, onerror=_make_writable_and_retry)
            else:
                os.unlink(entry.path)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="agent.executor", description=__doc__)
    parser.add_argument("--socket", required=True, help="unix socket path to listen on")
    parser.add_argument("--work-dir", required=True, help="where commands start")
    parser.add_argument("--wipe", action="append", default=[], help="folder reset empties")
    parser.add_argument(
        "--python-socket", help="the Python worker's socket (default: beside --socket)"
    )
    parser.add_argument("--shell", default="/bin/bash")
    parser.add_argument("--python-grace", type=float, default=0.5)
    parser.add_argument("--contained", action="store_true", help="reset kills every process")
    parser.add_argument("--exit-with-parent", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.contained and os.getppid() != 1:
        print(
            "agent.executor: --contained needs an init as parent (docker --init)", file=sys.stderr
        )
        return 2
    args.python_socket = args.python_socket or os.path.join(
        os.path.dirname(args.socket), PYTHON_SOCKET_NAME
    )
    os.chdir(args.work_dir)
    executor = Executor(args)
    executor.worker.start()  # listening before the executor's socket appears
    server = listen(args.socket)
    serve(
        server,
        executor.handle,
        tick=executor.worker.watch,
        exit_with=os.getppid() if args.exit_with_parent else None,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
