"""The executor: serves shell, Python, file, check and reset requests on a unix socket.

Run inside a box as root (the trusted side), e.g. ``python3 -m agent.executor --socket
/run/rollgym/executor.sock --contained --agent-user 61000:61000 --verifier-user
61001:61000 --host-user 0:0 --orphan-after 30 ...``: agent commands then run as the
agent's user, checks as the verifier's (``identity``, ``verifier``), and reset kills
every process of those two users. ``--contained`` says we are alone in a box: the
cgroup's OOM counter is ours, and only peers from outside the box's pid namespace may
connect; with ``--relayed`` (a box on a remote Docker host, reached through ``relay`` in
the box) only the host's user may. The fake sandbox runs it on the host, with no users to
switch.

In a box a small keeper (``sh``) restarts the executor if a signal ends it (the kernel's
OOM killer can pick it when the agent fills the memory with many small processes), after
killing every process but the init: a fresh executor never shares the box with agent
processes of an earlier one. ``ping`` says who answers (``pid``) and how many processes
the OOM killer took in the box so far (``oom_kills``), so the host can tell a restart the
agent caused from a failure of ours.

Requests and replies are frames (``framing``); one request is served at a time, from any
number of host connections. Every request names an ``op``::

    ping                             -> {ok, pid, oom_kills}
    shell  {command, timeout, cap,   -> {ok, exit_code, stdout, stderr, truncated,
            stdin (base64, optional)}      duration_s, timed_out, oom}
    python_exit {cap}                -> the same, for a Python call the host lost
    write  {path, data (base64)}     -> {ok}
    read   {path, max_bytes}         -> {ok, data (base64)}
    verify {checks: [{command, stdin (base64), timeout}]}
                                     -> {ok, holds: [bool, ...]}
    grade  {command, cwd, timeout, cap, env, max_bytes,
            files: [{path, data (base64)}], read: [path]}
                                     -> {ok, exit_code, timed_out, duration_s, output,
                                         files: {path: base64 | null}}
    reset                            -> {ok, duration_s, oom_kills}

``grade`` ends the agent's part of an episode: every agent process is killed, then a
task's tests run as the verifier in the verifier folders (``--verifier-dir``; ``grader``).
A task's starting files (``--seed``, a folder of the image) are copied into the work dir
when the executor starts on an empty one and after every reset (``seed``).

Python calls go to the Python worker's own socket (``pyworker``), with the same request
and reply as ``shell`` (``{op: python, code, timeout, cap}``).

A failed request answers ``{ok: false, error: bad_request | file | grading |
reset_failed | internal, message}``; the executor itself never dies of a request. Files are read and
written as the agent (its file-system identity), only regular files, never blocking on
a FIFO, never in /proc or /sys (where /proc/self would be the executor). The sockets
appear (atomically, by rename) only once they are listening.
"""

from __future__ import annotations

import argparse
import base64
import os
import socket
import stat
import sys
import time
from collections.abc import Callable

from .framing import Frame
from .grader import Grader, GradingError
from .identity import Identities, User
from .processes import group_alive, kill_group, kill_users, oom_kill_count, reap_children
from .pyworker import PythonWorker
from .result import CallResult
from .seed import plant
from .server import Admit, from_outside_the_box, from_user, listen, serve
from .shell import run_shell
from .verifier import Verifier
from .wipe import WipedFolder, remove_ipc_objects

OOM_EXIT_CODE = 137  # 128 + SIGKILL: how the OOM killer's victims exit
PYTHON_SOCKET_NAME = "python.sock"
FILE_FLAGS = os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC  # a FIFO never blocks us
# /proc/self is the executor itself, whoever's file-system identity opens it: file calls
# never reach these file systems.
PSEUDO_FILE_SYSTEMS = ("/proc", "/sys")


class RequestError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class Executor:
    """Request handlers and the box's in-executor state (Python worker, process groups)."""

    def __init__(self, args: argparse.Namespace, identities: Identities) -> None:
        self.args = args
        self.identities = identities
        self.worker = PythonWorker(args.python_socket, args.work_dir, args.python_grace, identities)
        self.verifier = Verifier(identities, args.shell, args.work_dir)
        self.groups: set[int] = set()  # shell process groups that may still hold processes
        for folder in args.verifier_dir:  # the verifier's alone, whatever the mount said
            with identities.as_verifier_files():
                os.chmod(folder, 0o700)
        verifier_folders = [WipedFolder.capture(folder) for folder in args.verifier_dir]
        self.folders = [WipedFolder.capture(folder) for folder in args.wipe] + verifier_folders
        self.grader = Grader(identities, args.shell, verifier_folders)
        self.oom_seen = self._oom_count()
        self.handlers: dict[str, Callable[[Frame, socket.socket | None], Frame]] = {
            "ping": lambda req, host: {
                "ok": True,
                "pid": os.getpid(),
                "oom_kills": self._oom_count(),
            },
            "shell": self.shell,
            "python_exit": self.python_exit,
            "write": self.write,
            "read": self.read,
            "verify": self.verify,
            "grade": self.grade,
            "reset": self.reset,
        }

    def handle(self, request: Frame, host: socket.socket | None) -> Frame:
        handler = self.handlers.get(str(request.get("op")))
        try:
            if handler is None:
                raise RequestError("bad_request", f"unknown op {request.get('op')!r}")
            return handler(request, host)
        except RequestError as exc:
            return {"ok": False, "error": exc.kind, "message": str(exc)}
        except (KeyError, TypeError, ValueError) as exc:
            return {"ok": False, "error": "bad_request", "message": f"{type(exc).__name__}: {exc}"}
        except Exception as exc:  # a request must never take the box down with it
            return {"ok": False, "error": "internal", "message": f"{type(exc).__name__}: {exc}"}

    def shell(self, req: Frame, host: socket.socket | None) -> Frame:
        result, pgid = run_shell(
            req["command"],
            shell=self.args.shell,
            cwd=self.args.work_dir,
            timeout=float(req["timeout"]),
            cap=int(req["cap"]),
            host=host,
            stdin=base64.b64decode(req.get("stdin", "")),
            identities=self.identities,
        )
        if pgid is not None:
            self.groups.add(pgid)
        # Forget groups with no process left: their ids may be reused (on a host, by others).
        self.groups = {group for group in self.groups if group_alive(group)}
        return self._with_oom(result).to_message()

    def python_exit(self, req: Frame, host: socket.socket | None) -> Frame:
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

    def _path(self, req: Frame) -> str:
        return os.path.join(self.args.work_dir, str(req["path"]))

    def write(self, req: Frame, host: socket.socket | None) -> Frame:
        path, data = self._path(req), base64.b64decode(req["data"])
        try:
            with self.identities.as_agent_files():
                os.makedirs(os.path.dirname(path), exist_ok=True)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | FILE_FLAGS, 0o644)
                try:
                    _require_regular(fd, req["path"])
                    os.ftruncate(fd, 0)
                    with open(fd, "wb", closefd=False) as f:
                        f.write(data)
                finally:
                    os.close(fd)
        except OSError as exc:
            raise RequestError("file", f"cannot write {req['path']}: {exc.strerror}") from exc
        return {"ok": True}

    def read(self, req: Frame, host: socket.socket | None) -> Frame:
        path, limit = self._path(req), int(req["max_bytes"])
        try:
            with self.identities.as_agent_files():
                fd = os.open(path, os.O_RDONLY | FILE_FLAGS)
            with open(fd, "rb") as f:
                _require_regular(fd, req["path"])
                if os.fstat(fd).st_size > limit:
                    raise RequestError("file", f"{req['path']} is larger than {limit} bytes")
                data = f.read(limit + 1)
        except OSError as exc:
            raise RequestError("file", f"cannot read {req['path']}: {exc.strerror}") from exc
        if len(data) > limit:
            raise RequestError("file", f"{req['path']} is larger than {limit} bytes")
        return {"ok": True, "data": base64.b64encode(data).decode()}

    def verify(self, req: Frame, host: socket.socket | None) -> Frame:
        checks = [
            (str(c["command"]), base64.b64decode(c.get("stdin", "")), float(c["timeout"]))
            for c in req["checks"]
        ]
        return {"ok": True, "holds": self.verifier.run(checks)}

    def grade(self, req: Frame, host: socket.socket | None) -> Frame:
        """End the agent, then run the tests. The folders themselves get their mode back
        first: an agent that locked its work dir would keep the tests from starting, an
        infrastructure failure it chose; what it did to the files inside is graded."""
        try:
            self.end_agent()
            for folder in self.folders:
                folder.restore(switching=self.identities.switching)
            return self.grader.run(req, host)
        except GradingError as exc:
            raise RequestError("grading", str(exc)) from exc
        except (OSError, TimeoutError) as exc:
            raise RequestError("grading", f"{type(exc).__name__}: {exc}") from exc

    def end_agent(self) -> None:
        """Kill every process of the agent (and of the verifier): its part is over."""
        self.kill_untrusted()  # first: no agent process is left to hold a child of ours
        self.worker.stop()
        for pgid in self.groups:
            kill_group(pgid)
        self.groups.clear()
        reap_children()

    def plant_seed(self) -> None:
        """Copy the task's starting files into the (empty) work dir, as the agent's."""
        if self.args.seed:
            plant(self.args.seed, self.args.work_dir, self.identities.agent)

    def reset(self, req: Frame, host: socket.socket | None) -> Frame:
        start = time.monotonic()
        try:
            self.end_agent()
            for folder in self.folders:
                folder.reset(switching=self.identities.switching)
            if self.identities.switching:
                remove_ipc_objects()
            self.plant_seed()
        except (OSError, TimeoutError) as exc:
            raise RequestError("reset_failed", str(exc)) from exc
        self.worker.start()
        self.oom_seen = self._oom_count()
        return {"ok": True, "duration_s": time.monotonic() - start, "oom_kills": self.oom_seen}

    def kill_untrusted(self) -> None:
        """SIGKILL every agent and verifier process, whatever session or group it hid in."""
        users = (self.identities.agent, self.identities.verifier)
        uids = [user.uid for user in users if user is not None]
        if uids:
            kill_users(*uids)


def _require_regular(fd: int, name: object) -> None:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_dev in _pseudo_devices():
        raise RequestError("file", f"{name} is not a regular file")


def _pseudo_devices() -> set[int]:
    return {os.stat(path).st_dev for path in PSEUDO_FILE_SYSTEMS if os.path.isdir(path)}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="agent.executor", description=__doc__)
    parser.add_argument("--socket", required=True, help="unix socket path to listen on")
    parser.add_argument("--work-dir", required=True, help="where commands start")
    parser.add_argument("--wipe", action="append", default=[], help="folder reset empties")
    parser.add_argument(
        "--verifier-dir", action="append", default=[], help="a folder of gradings (reset empties)"
    )
    parser.add_argument("--seed", help="a folder copied into the work dir at start and reset")
    parser.add_argument(
        "--python-socket", help="the Python worker's socket (default: beside --socket)"
    )
    parser.add_argument("--shell", default="/bin/bash")
    parser.add_argument("--python-grace", type=float, default=0.5)
    parser.add_argument("--contained", action="store_true", help="we are alone in a box")
    parser.add_argument(
        "--relayed",
        action="store_true",
        help="the host connects through agent.relay in the box, as --host-user: admit that "
        "user alone (a box on a remote Docker host)",
    )
    parser.add_argument("--exit-with-parent", action="store_true")
    parser.add_argument("--agent-user", type=User.parse, help="uid:gid agent processes run as")
    parser.add_argument("--verifier-user", type=User.parse, help="uid:gid checks run as")
    parser.add_argument("--host-user", type=User.parse, help="uid:gid that owns our sockets")
    parser.add_argument(
        "--orphan-after", type=float, help="exit once no host was connected this many seconds"
    )
    return parser.parse_args(argv)


def identities_of(args: argparse.Namespace) -> Identities:
    """The users of ``args``; all of them or none (the fake), and only root can switch."""
    users = (args.agent_user, args.verifier_user, args.host_user)
    if all(user is None for user in users):
        return Identities.none()
    if any(user is None for user in users):
        raise SystemExit("agent.executor: give --agent-user, --verifier-user and --host-user")
    if os.geteuid() != 0:
        raise SystemExit("agent.executor: switching users needs the executor to run as root")
    agent, verifier, host = users
    if agent.uid in (0, verifier.uid, host.uid) or verifier.uid in (0, host.uid):
        raise SystemExit("agent.executor: the agent, verifier and host need uids of their own")
    return Identities(agent, verifier, host)


def admission(args: argparse.Namespace, identities: Identities) -> Admit | None:
    """Who may connect: in a box, only the host (from outside its pid namespace) or, when
    relayed, only the host's user (the relay in the box); anyone for the fake."""
    if args.relayed:
        if identities.host is None:
            raise SystemExit("agent.executor: --relayed needs --host-user, the relay's user")
        return from_user(identities.host.uid)
    return from_outside_the_box if args.contained else None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    identities = identities_of(args)
    args.python_socket = args.python_socket or os.path.join(
        os.path.dirname(args.socket), PYTHON_SOCKET_NAME
    )
    if args.relayed:  # a tmpfs takes the mode of the image's folder: make it the relay's alone
        with identities.as_host_files():
            os.chmod(os.path.dirname(args.socket), 0o700)
    os.chdir(args.work_dir)
    executor = Executor(args, identities)
    executor.kill_untrusted()  # nothing an earlier executor's agent left may outlive it
    if not os.listdir(args.work_dir):  # a restarted executor keeps the agent's files
        executor.plant_seed()
    executor.worker.start()  # listening before the executor's socket appears
    with identities.as_host_files():
        server = listen(args.socket)
    serve(
        server,
        executor.handle,
        tick=executor.worker.watch,
        exit_with=os.getppid() if args.exit_with_parent else None,
        admit=admission(args, identities),
        orphan_after=args.orphan_after,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
