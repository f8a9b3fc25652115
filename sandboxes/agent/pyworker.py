"""The agent's Python namespace, in a forked child of the executor that the host calls directly.

The worker answers on its own socket (``python.sock`` next to the executor's), so a Python
call costs one hop, host <-> worker. Forking (rather than starting ``python3``) makes a
fresh namespace cost about a millisecond; a separate process keeps agent code away from
the executor: ``os._exit``, a segfault or a patched module ends the worker, not the box.
The worker is agent code's own process: the executor binds its socket (as the host's
user, in the host's folder, so the agent can never replace or redirect it), forks, and
the child becomes the agent's user before it runs anything. Whatever the worker answers
is the agent's output and nothing more: the host reads it as untrusted data.

Each snippet runs REPL-style: a trailing expression's value is printed (and kept as
``_``), ``SystemExit`` sets the exit code and keeps the namespace, an exception prints
its traceback and exits 1. Output goes to two memfds on fds 1 and 2 (so ``print`` and
child processes land in order, nothing blocks on a full pipe), read up to the cap after
the call and emptied.

Timeouts are the executor's job, through a deadline the worker writes into shared memory
at each call: past it, the executor sends SIGINT (``KeyboardInterrupt``, the namespace
lives on); a worker still busy ``grace`` seconds later is SIGKILLed with its group. The
host then sees its connection drop and asks the executor (``python_exit``) how the worker
ended; the executor answers with the partial output and starts a fresh worker.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import ctypes
import math
import mmap
import os
import signal
import socket
import struct
import sys
import time
import traceback
from types import FrameType
from typing import Any, TextIO

from .framing import Frame
from .identity import Identities, become
from .processes import KILLED, exit_code_of, kill_group, reap
from .result import CallResult
from .server import listen, serve

DEADLINE = struct.Struct("d")  # monotonic seconds; 0.0 while no call runs
FD_LIMIT = 1 << 20
PR_SET_PDEATHSIG = 1
NAMESPACE_LOST = "rollgym: the Python process ended; its namespace was reset\n"
WATCH_INTERVAL_S = 0.1


class _Interruptible:
    """SIGINT raises KeyboardInterrupt only while agent code runs, never in our own loop."""

    running = False
    interrupted = False

    @classmethod
    def handler(cls, signum: int, frame: FrameType | None) -> None:
        if cls.running:
            cls.interrupted = True
            raise KeyboardInterrupt


def execute(source: str, namespace: dict[str, Any]) -> int:
    """Run ``source`` in ``namespace`` like a REPL cell; return its exit code."""
    try:
        tree = ast.parse(source, "<input>", "exec")
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        assert last is None or isinstance(last, ast.Expr)
        _Interruptible.running = True
        exec(compile(tree, "<input>", "exec"), namespace)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), "<input>", "eval"), namespace)
            if value is not None:
                namespace["_"] = value
                print(repr(value))
        return 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except SyntaxError as exc:
        sys.stderr.write("".join(traceback.format_exception_only(exc)))
        return 1
    except BaseException as exc:
        report = traceback.TracebackException.from_exception(exc)
        # Our own frames (this function, the SIGINT handler) are no part of the agent's error.
        report.stack = traceback.StackSummary.from_list(
            [frame for frame in report.stack if frame.filename != __file__]
        )
        sys.stderr.write("".join(report.format()))
        return 1
    finally:
        _Interruptible.running = False


def take_output(fd: int, cap: int) -> tuple[str, bool]:
    """Read (up to ``cap`` bytes) and empty a memfd; also whether it held more."""
    size = os.fstat(fd).st_size
    if size == 0:
        return "", False
    data = os.pread(fd, cap, 0)
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    return data.decode("utf-8", errors="replace"), size > cap


class _Session:
    """The worker's side: one namespace, calls timed against the shared deadline."""

    def __init__(self, deadline: mmap.mmap) -> None:
        self.deadline = deadline
        self.namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}

    def handle(self, request: Frame, host: socket.socket) -> Frame:
        if request.get("op") == "ping":
            return {"ok": True, "pid": os.getpid()}
        if request.get("op") != "python":
            return {"ok": False, "error": "bad_request", "message": "the worker runs Python only"}
        start = time.monotonic()
        cap = int(request["cap"])
        _Interruptible.interrupted = False
        DEADLINE.pack_into(self.deadline, 0, start + float(request["timeout"]))
        try:
            exit_code = execute(request["code"], self.namespace)
        finally:
            DEADLINE.pack_into(self.deadline, 0, 0.0)
        sys.stdout.flush()
        sys.stderr.flush()
        out, out_cut = take_output(1, cap)
        err, err_cut = take_output(2, cap)
        return CallResult(
            exit_code=exit_code,
            stdout=out,
            stderr=err,
            truncated=out_cut or err_cut,
            duration_s=time.monotonic() - start,
            timed_out=_Interruptible.interrupted,
        ).to_message()


def _terminal_like(fd: int) -> TextIO:
    """A line-buffered text stream on ``fd``: prints and child processes' output keep their
    order, as on a terminal. It lives as long as the worker."""
    return open(fd, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)


def _die_with_parent(parent: int) -> None:
    """SIGKILL us when the executor dies: a namespace without its executor is no use."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it died before the line above
        os._exit(0)


def _worker_main(
    server: socket.socket,
    out: int,
    err: int,
    cwd: str,
    deadline: mmap.mmap,
    identities: Identities,
) -> None:
    parent = os.getppid()
    become(identities.agent)  # first: nothing runs in here as the executor's user
    _die_with_parent(parent)  # after: a change of user clears the parent-death signal
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDONLY)
    for src, dst in ((devnull, 0), (out, 1), (err, 2)):
        os.dup2(src, dst)
    keep = server.fileno()
    os.closerange(3, keep)
    os.closerange(keep + 1, FD_LIMIT)
    signal.signal(signal.SIGINT, _Interruptible.handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.chdir(cwd)
    sys.stdout, sys.stderr = _terminal_like(1), _terminal_like(2)
    serve(server, _Session(deadline).handle, exit_with=parent)


class PythonWorker:
    """The executor's handle on its Python worker: start, watch the deadline, stop, report."""

    def __init__(self, socket_path: str, cwd: str, grace: float, identities: Identities) -> None:
        self.socket_path = socket_path
        self.cwd = cwd
        self.grace = grace
        self.identities = identities
        self.pid: int | None = None
        self.deadline = mmap.mmap(-1, DEADLINE.size)  # shared with every forked worker
        self._outputs: tuple[int, int] | None = None
        self._interrupted: float | None = None  # the deadline we sent SIGINT for
        self.killed = False  # by the watchdog, past deadline + grace
        self._exit_status: int | None = None  # reaped by watch() before anyone asked

    def start(self) -> None:
        """Fork a fresh worker; its socket is listening when this returns."""
        with self.identities.as_host_files(), contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        DEADLINE.pack_into(self.deadline, 0, 0.0)
        self._close_outputs()
        out, err = os.memfd_create("stdout"), os.memfd_create("stderr")
        with self.identities.as_host_files():
            server = listen(self.socket_path)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child never returns into the executor's code
            try:
                _worker_main(server, out, err, self.cwd, self.deadline, self.identities)
            finally:
                os._exit(0)
        server.close()
        self.pid, self._outputs = pid, (out, err)
        self._interrupted, self.killed = None, False

    def watch(self) -> float:
        """Enforce the running call's deadline; return when to look again (seconds)."""
        if self.pid is None or self._exit_status is not None:
            return 1.0
        pid, status = os.waitpid(self.pid, os.WNOHANG)
        if pid:  # it ended by itself: nothing to enforce, the host will ask how
            self._exit_status = status
            return 1.0
        (deadline,) = DEADLINE.unpack_from(self.deadline, 0)
        if not math.isfinite(deadline):  # the worker's memory is the agent's to scribble on
            deadline = 1.0
        now = time.monotonic()
        if deadline == 0.0 or now < deadline:
            return WATCH_INTERVAL_S if deadline == 0.0 else min(deadline - now, WATCH_INTERVAL_S)
        if self._interrupted != deadline:
            self._interrupted = deadline
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGINT)
            return self.grace
        if now >= deadline + self.grace:
            kill_group(self.pid)
            self.killed = True
            return WATCH_INTERVAL_S
        return deadline + self.grace - now

    def stop(self) -> int | None:
        """Kill the worker and its group; return its exit code if there was one."""
        if self.pid is None:
            return None
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)  # a worker just forked may not lead its group yet
        kill_group(self.pid)
        status = self._exit_status
        if status is None:
            status = reap(self.pid)
        self.pid, self._exit_status = None, None
        with self.identities.as_host_files(), contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        if status is None:  # held by a tracer of the agent's: reaped later
            return KILLED
        return exit_code_of(os.waitstatus_to_exitcode(status))

    def end_report(self, cap: int) -> CallResult:
        """How the worker ended (the host lost it mid-call), with its last output."""
        killed = self.killed
        exit_code = self.stop() or 0
        out, out_cut, err, err_cut = "", False, "", False
        if self._outputs is not None:
            out, out_cut = take_output(self._outputs[0], cap)
            err, err_cut = take_output(self._outputs[1], cap)
        return CallResult(exit_code, out, err + NAMESPACE_LOST, out_cut or err_cut, 0.0, killed)

    def _close_outputs(self) -> None:
        if self._outputs is not None:
            for fd in self._outputs:
                os.close(fd)
            self._outputs = None
