"""The agent's Python namespace, kept alive between calls in a forked child of the executor.

Forking (rather than starting ``python3``) makes a fresh namespace cost about a
millisecond, and keeps agent code out of the executor's own process: ``os._exit`` or a
segfault ends the worker, not the box. The worker runs each snippet REPL-style: the value
of a trailing expression is printed (and kept as ``_``), ``SystemExit`` sets the exit code
without ending the namespace, an exception prints its traceback and exits 1.

A call past its timeout first gets SIGINT (``KeyboardInterrupt``, namespace kept); a
worker that still does not answer within ``grace`` seconds is killed with its group and
replaced by a fresh one (namespace lost, said on stderr).
"""

from __future__ import annotations

import ast
import builtins
import os
import signal
import socket
import sys
import time
import traceback
from types import FrameType
from typing import Any

from .framing import FrameError, recv_frame, send_frame
from .processes import exit_code_of, kill_group
from .result import CallResult
from .streams import CappedOutput, Outcome, drain, pump

FD_LIMIT = 1 << 20
NAMESPACE_LOST = "rollgym: the Python process ended; its namespace was reset\n"


class _Interruptible:
    """SIGINT raises KeyboardInterrupt only while agent code runs, never in our own loop."""

    running = False

    @classmethod
    def handler(cls, signum: int, frame: FrameType | None) -> None:
        if cls.running:
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
        tb = exc.__traceback__.tb_next if exc.__traceback__ else None
        sys.stderr.write("".join(traceback.format_exception(type(exc), exc, tb)))
        return 1
    finally:
        _Interruptible.running = False


def _worker_main(ctrl: socket.socket, out_w: int, err_w: int, cwd: str) -> None:
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDONLY)
    for src, dst in ((devnull, 0), (out_w, 1), (err_w, 2)):
        os.dup2(src, dst)
    keep = ctrl.fileno()
    os.closerange(3, keep)
    os.closerange(keep + 1, FD_LIMIT)
    signal.signal(signal.SIGINT, _Interruptible.handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.chdir(cwd)
    # The worker's whole life is these two streams; they end with the process.
    sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    while (request := recv_frame(ctrl)) is not None:
        exit_code = execute(request["code"], namespace)
        sys.stdout.flush()
        sys.stderr.flush()
        send_frame(ctrl, {"exit_code": exit_code})


class PythonWorker:
    """The executor's handle on its forked Python worker."""

    def __init__(self, cwd: str, grace: float) -> None:
        self.cwd = cwd
        self.grace = grace
        self.pid: int | None = None
        self._ctrl: socket.socket | None = None
        self._outputs: dict[int, CappedOutput] = {}

    def start(self) -> None:
        ctrl, child_ctrl = socket.socketpair()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child never returns into the executor's code
            try:
                ctrl.close()
                _worker_main(child_ctrl, out_w, err_w, self.cwd)
            finally:
                os._exit(0)
        child_ctrl.close()
        os.close(out_w)
        os.close(err_w)
        for fd in (out_r, err_r):
            os.set_blocking(fd, False)
        self.pid, self._ctrl = pid, ctrl
        self._outputs = {out_r: CappedOutput(0), err_r: CappedOutput(0)}

    def stop(self) -> int | None:
        """Kill the worker and its group; return its exit code if it had one."""
        if self.pid is None:
            return None
        kill_group(self.pid)
        _, status = os.waitpid(self.pid, 0)
        assert self._ctrl is not None
        self._ctrl.close()
        for fd in self._outputs:
            os.close(fd)
        self.pid, self._ctrl, self._outputs = None, None, {}
        return exit_code_of(os.waitstatus_to_exitcode(status))

    def run(self, code: str, *, timeout: float, cap: int, host: socket.socket | None) -> CallResult:
        start = time.monotonic()
        if self.pid is None:
            self.start()
        assert self._ctrl is not None and self.pid is not None
        drain(self._outputs)  # leftovers of background output belong to no call
        out, err = CappedOutput(cap), CappedOutput(cap)
        outputs = dict(zip(self._outputs, (out, err), strict=True))
        send_frame(self._ctrl, {"code": code})
        outcome = pump(outputs, self._ctrl.fileno(), start + timeout, host)
        timed_out = outcome is not Outcome.DONE
        if timed_out:
            os.killpg(self.pid, signal.SIGINT)
            outcome = pump(outputs, self._ctrl.fileno(), time.monotonic() + self.grace)
        reply = self._reply() if outcome is Outcome.DONE else None
        drain(outputs)
        if reply is not None:
            exit_code = int(reply["exit_code"])
        else:  # the worker died, or would not stop: its namespace is gone
            exit_code = self.stop() or 0
            err.feed(NAMESPACE_LOST.encode())
        return CallResult(
            exit_code=exit_code,
            stdout=out.text(),
            stderr=err.text(),
            truncated=out.truncated or err.truncated,
            duration_s=time.monotonic() - start,
            timed_out=timed_out,
        )

    def _reply(self) -> dict[str, Any] | None:
        assert self._ctrl is not None
        try:
            return recv_frame(self._ctrl)
        except (FrameError, OSError):
            return None
