"""``ExecutorSandbox``: the ``Sandbox`` interface over an executor's unix socket.

Whatever hosts the executor (a Docker container, or a host process for the fake), the
calls are the same: build a request with the call's timeout and the output cap, wait at
most ``timeout + host_grace_s`` for the reply, and translate it. A transport failure or
a failed reset marks the box ``DEAD`` (``SandboxDied``: the executor is out of the
agent's reach, so that is the infrastructure's failure). A command past its timeout
raises ``SandboxTimeout``, one killed for memory ``SandboxOOM``: the agent's doing
(``AgentFault``), and the box stays ``READY``; the pool retires a box that had an OOM
kill when it comes back.

Python calls go straight to the box's Python worker (its own socket beside the
executor's): one hop per call. The worker is the agent's process, so its reply is read
as untrusted data (``replies``). When that connection drops mid-call or the reply makes
no sense (the worker was killed at its deadline, ran out of memory, called ``os._exit``
or was patched by agent code), the executor is asked (``python_exit``) how the worker
ended, and the answer is the call's result.

A box may restart its executor (``restarts``: the Docker box's keeper does, when a signal
ended it). When the connection breaks, the host then asks the executor who it is: a new
executor and a moved OOM counter mean the agent filled the box's memory until the
kernel's OOM killer took the executor, and everything the agent ran went with it: a
``SandboxOOM`` (the agent's doing), the box usable again. Anything else is ``SandboxDied``.

Paths of file calls must be text a file system can hold (no NUL, no lone surrogate):
anything else is a ``SandboxFileError`` before it leaves the host.
"""

from __future__ import annotations

import asyncio
import base64
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from . import metrics as m
from .agent.executor import PYTHON_SOCKET_NAME
from .agent.framing import Frame
from .base import (
    Check,
    ExecResult,
    Graded,
    Grading,
    SandboxDied,
    SandboxError,
    SandboxFileError,
    SandboxOOM,
    SandboxState,
    SandboxStateError,
    SandboxTimeout,
)
from .client import ExecutorClient, Relay, TransportError
from .config import SandboxConfig
from .replies import BadReply, CallReply, read_reply, worker_frame_limit

VERIFY_GRACE_S = 1.0  # per check, on top of its timeout: starting it, freezing the agent
RECOVERY_POLL_S = 0.05


def _same_path(path: str) -> str:
    return path


class ExecutorSandbox:
    """One box, seen from the host. Thread-safe for sync calls; async calls never block.

    ``executor_uid`` is the user the executor runs as, seen from the host: every socket
    of the box must have been listened on by it. ``restarts``: the box restarts its
    executor when a signal ends it (see the module docstring). ``relay``: the box's
    sockets are reached through it (a box on another host), ``socket_path`` is then the
    executor's socket as the box sees it.
    """

    def __init__(
        self,
        box_id: str,
        socket_path: str,
        config: SandboxConfig,
        *,
        executor_uid: int,
        metrics: m.MetricsSink | None = None,
        map_path: Callable[[str], str] = _same_path,
        restarts: bool = False,
        relay: Relay | None = None,
    ) -> None:
        self._id = box_id
        self._restarts = restarts
        self._executor: tuple[object, object] | None = None  # (pid, oom_kills) last seen
        self._client = ExecutorClient(socket_path, listener_uid=executor_uid, relay=relay)
        self._python = ExecutorClient(
            os.path.join(os.path.dirname(socket_path), PYTHON_SOCKET_NAME),
            listener_uid=executor_uid,
            max_frame=worker_frame_limit(config.output_limit_bytes),
            relay=relay,
        )
        self._config = config
        self._metrics = metrics or m.NullMetrics()
        self._map_path = map_path
        self._state = SandboxState.READY
        self.timeouts = 0  # commands killed at their timeout since the last reset
        self.oom_kills = 0  # commands killed for memory since the box started
        self.death_reason: str | None = None

    @property
    def id(self) -> str:
        return self._id

    @property
    def state(self) -> SandboxState:
        return self._state

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._id} {self._state.value}>"

    # -- calls ------------------------------------------------------------------------------
    def run_shell(
        self, command: str, *, timeout: float | None = None, stdin: str | bytes | None = None
    ) -> ExecResult:
        return self._exec("shell", self._shell_fields(command, stdin), timeout)

    def run_python(self, code: str, *, timeout: float | None = None) -> ExecResult:
        request = self._command_request("python", {"code": code}, timeout)
        start = time.perf_counter()
        self._check_usable()
        try:
            reply = self._worker_reply(
                self._python.call(request, request["timeout"] + self._config.host_grace_s)
            )
        except TransportError:
            self._python.close()
            lost = self._call(self._lost_python_request(), self._config.host_grace_s)
            reply = self._lost_python_reply(request, lost, start)
        return self._exec_result(request, reply, time.perf_counter() - start)

    def write_file(self, path: str, content: bytes | str) -> None:
        self._call_timed(
            "write", self._write_request(path, content), self._config.command_timeout_s
        )

    def read_file(self, path: str) -> bytes:
        reply = self._call_timed("read", self._read_request(path), self._config.command_timeout_s)
        return base64.b64decode(reply["data"])

    def verify(self, checks: Sequence[Check]) -> tuple[bool, ...]:
        request, budget = self._verify_request(checks)
        return _holds(self._call_timed("verify", request, budget), len(checks))

    def grade(self, grading: Grading) -> Graded:
        request, budget, paths = self._grade_request(grading)
        return _graded(self._call_timed("grade", request, budget), paths)

    def reset(self) -> None:
        start = time.perf_counter()
        self._finish_reset(self._call({"op": "reset"}, self._config.reset_timeout_s), start)

    def ping(self, timeout: float | None = None) -> None:
        """Raise ``SandboxDied`` unless the executor answers (health checks), within
        ``timeout`` (default ``host_grace_s``) plus ``host_grace_s``."""
        self._seen(self._call({"op": "ping"}, timeout or self._config.host_grace_s))

    async def arun_shell(
        self, command: str, *, timeout: float | None = None, stdin: str | bytes | None = None
    ) -> ExecResult:
        return await self._aexec("shell", self._shell_fields(command, stdin), timeout)

    async def arun_python(self, code: str, *, timeout: float | None = None) -> ExecResult:
        request = self._command_request("python", {"code": code}, timeout)
        start = time.perf_counter()
        self._check_usable()
        try:
            deadline = request["timeout"] + self._config.host_grace_s
            reply = self._worker_reply(await self._python.acall(request, deadline))
        except TransportError:
            self._python.close()
            lost = await self._acall(self._lost_python_request(), self._config.host_grace_s)
            reply = self._lost_python_reply(request, lost, start)
        return self._exec_result(request, reply, time.perf_counter() - start)

    async def awrite_file(self, path: str, content: bytes | str) -> None:
        request = self._write_request(path, content)
        await self._acall_timed("write", request, self._config.command_timeout_s)

    async def aread_file(self, path: str) -> bytes:
        request = self._read_request(path)
        reply = await self._acall_timed("read", request, self._config.command_timeout_s)
        return base64.b64decode(reply["data"])

    async def averify(self, checks: Sequence[Check]) -> tuple[bool, ...]:
        request, budget = self._verify_request(checks)
        return _holds(await self._acall_timed("verify", request, budget), len(checks))

    async def agrade(self, grading: Grading) -> Graded:
        request, budget, paths = self._grade_request(grading)
        return _graded(await self._acall_timed("grade", request, budget), paths)

    async def areset(self) -> None:
        start = time.perf_counter()
        reply = await self._acall({"op": "reset"}, self._config.reset_timeout_s)
        self._finish_reset(reply, start)

    # -- life -------------------------------------------------------------------------------
    def mark_dead(self, reason: str) -> None:
        if self._state is not SandboxState.CLOSED and self._state is not SandboxState.DEAD:
            self._state = SandboxState.DEAD
            self.death_reason = reason
            self._metrics.increment(m.DEATHS, {"reason": reason})

    def close(self) -> None:
        """Drop the connections (the box's owner stops the executor)."""
        self._state = SandboxState.CLOSED
        self._client.close()
        self._python.close()

    # -- requests and replies -----------------------------------------------------------------
    def _command_request(self, op: str, fields: dict[str, Any], timeout: float | None) -> Frame:
        seconds = self._config.command_timeout_s if timeout is None else timeout
        if seconds <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        return {"op": op, **fields, "timeout": seconds, "cap": self._config.output_limit_bytes}

    @staticmethod
    def _shell_fields(command: str, stdin: str | bytes | None) -> dict[str, Any]:
        fields: dict[str, Any] = {"command": command}
        if stdin:
            fields["stdin"] = _base64(stdin)
        return fields

    def _lost_python_request(self) -> Frame:
        return {"op": "python_exit", "cap": self._config.output_limit_bytes}

    def _worker_reply(self, reply: Frame) -> CallReply:
        """The worker's answer, read as the agent's data; nonsense counts as a lost call."""
        try:
            return read_reply(reply, cap=self._config.output_limit_bytes, trusted=False)
        except BadReply as exc:
            raise TransportError(f"the Python worker answered nonsense: {exc}") from exc

    def _lost_python_reply(self, request: Frame, reply: Frame, start: float) -> CallReply:
        """The box could not time a call it lost; one that outlived its timeout timed out."""
        result = self._trusted_reply(reply)
        duration = time.perf_counter() - start
        timed_out = result.timed_out or duration >= request["timeout"]
        return CallReply(
            result.stdout,
            result.stderr,
            result.exit_code,
            result.truncated,
            duration,
            timed_out,
            result.oom,
        )

    def _trusted_reply(self, reply: Frame) -> CallReply:
        try:
            return read_reply(reply, cap=self._config.output_limit_bytes, trusted=True)
        except BadReply as exc:
            self.mark_dead("bad_reply")
            raise SandboxDied(f"sandbox {self._id}: the executor's reply is broken: {exc}") from exc

    def _write_request(self, path: str, content: bytes | str) -> Frame:
        return {"op": "write", "path": self._box_path(path), "data": _base64(content)}

    def _read_request(self, path: str) -> Frame:
        return {
            "op": "read",
            "path": self._box_path(path),
            "max_bytes": self._config.max_file_bytes,
        }

    def _box_path(self, path: str) -> str:
        if "\x00" in path:
            raise SandboxFileError(f"{path!r}: a path cannot hold a NUL character")
        try:
            path.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise SandboxFileError(f"{path!r}: a path must be valid Unicode text") from exc
        return self._map_path(path)

    def _verify_request(self, checks: Sequence[Check]) -> tuple[Frame, float]:
        fields = [
            {"command": c.command, "stdin": _base64(c.stdin), "timeout": c.timeout} for c in checks
        ]
        budget = sum(c.timeout + VERIFY_GRACE_S for c in checks)
        return {"op": "verify", "checks": fields}, budget

    def _grade_request(self, grading: Grading) -> tuple[Frame, float, dict[str, str]]:
        """The request, the host's budget for it, and box path -> the caller's path."""
        if grading.timeout <= 0:
            raise ValueError(f"a grading's timeout must be positive, got {grading.timeout}")
        paths = {self._box_path(path): path for path in grading.read}
        request = {
            "op": "grade",
            "command": grading.command,
            "cwd": self._box_path(grading.cwd),
            "timeout": grading.timeout,
            "cap": self._config.output_limit_bytes,
            "env": dict(grading.environment),
            "max_bytes": self._config.max_file_bytes,
            "files": [
                {"path": self._box_path(path), "data": _base64(data)}
                for path, data in grading.files.items()
            ],
            "read": list(paths),
        }
        # Killing the agent and emptying folders first, like a reset; then the tests.
        return request, grading.timeout + self._config.reset_timeout_s, paths

    def _exec(self, op: str, fields: dict[str, Any], timeout: float | None) -> ExecResult:
        request = self._command_request(op, fields, timeout)
        start = time.perf_counter()
        reply = self._trusted_reply(self._call(request, request["timeout"]))
        return self._exec_result(request, reply, time.perf_counter() - start)

    async def _aexec(self, op: str, fields: dict[str, Any], timeout: float | None) -> ExecResult:
        request = self._command_request(op, fields, timeout)
        start = time.perf_counter()
        reply = self._trusted_reply(await self._acall(request, request["timeout"]))
        return self._exec_result(request, reply, time.perf_counter() - start)

    def _call_timed(self, op: str, request: Frame, timeout: float) -> Frame:
        start = time.perf_counter()
        reply = self._call(request, timeout)
        self._metrics.observe(m.ROUND_TRIP, time.perf_counter() - start, {"op": op})
        return reply

    async def _acall_timed(self, op: str, request: Frame, timeout: float) -> Frame:
        start = time.perf_counter()
        reply = await self._acall(request, timeout)
        self._metrics.observe(m.ROUND_TRIP, time.perf_counter() - start, {"op": op})
        return reply

    def _call(self, request: Frame, timeout: float) -> Frame:
        self._check_usable()
        try:
            reply = self._client.call(request, timeout + self._config.host_grace_s)
        except TransportError as exc:
            raise self._lost(exc, self._recover()) from exc
        return self._check_reply(reply)

    async def _acall(self, request: Frame, timeout: float) -> Frame:
        self._check_usable()
        try:
            reply = await self._client.acall(request, timeout + self._config.host_grace_s)
        except TransportError as exc:
            raise self._lost(exc, await self._arecover()) from exc
        return self._check_reply(reply)

    def _recover(self) -> Frame | None:
        """A ``ping`` answer from the executor, come back within the grace; or None."""
        deadline = time.monotonic() + self._config.host_grace_s
        while self._restarts and time.monotonic() < deadline:
            try:
                return self._client.call({"op": "ping"}, RECOVERY_POLL_S * 20)
            except TransportError:
                time.sleep(RECOVERY_POLL_S)
        return None

    async def _arecover(self) -> Frame | None:
        deadline = time.monotonic() + self._config.host_grace_s
        while self._restarts and time.monotonic() < deadline:
            try:
                return await self._client.acall({"op": "ping"}, RECOVERY_POLL_S * 20)
            except TransportError:
                await asyncio.sleep(RECOVERY_POLL_S)
        return None

    def _lost(self, exc: TransportError, ping: Frame | None) -> SandboxError:
        """What a broken connection meant: the agent's OOM, or the box's death."""
        if ping is not None and self._restarted_by_oom(ping):
            self._seen(ping)
            self._python.close()
            self.oom_kills += 1
            self._metrics.increment(m.OOM_KILLS, {"op": "box"})
            return SandboxOOM(
                "the box ran out of memory and the kernel killed its executor: every "
                "process the agent had started is gone, files are kept"
            )
        return self._died(exc)

    def _restarted_by_oom(self, ping: Frame) -> bool:
        """Another executor answers, and the OOM killer took a process since we last looked."""
        if self._executor is None:
            return False
        pid, oom_kills = self._executor
        now = ping.get("oom_kills")
        if not isinstance(now, int) or not isinstance(oom_kills, int):
            return False
        return ping.get("pid") != pid and now > oom_kills

    def _seen(self, reply: Frame) -> None:
        self._executor = (reply.get("pid"), reply.get("oom_kills"))

    def _check_usable(self) -> None:
        if self._state is SandboxState.DEAD:
            raise SandboxDied(f"sandbox {self._id} died earlier ({self.death_reason})")
        if self._state is SandboxState.CLOSED:
            raise SandboxStateError(f"sandbox {self._id} is closed")

    def _died(self, exc: TransportError) -> SandboxDied:
        self.mark_dead("unresponsive")
        return SandboxDied(f"sandbox {self._id} stopped answering: {exc}")

    def _check_reply(self, reply: Frame) -> Frame:
        if reply.get("ok"):
            return reply
        kind, message = reply.get("error"), str(reply.get("message"))
        if kind == "file":
            raise SandboxFileError(message)
        if kind == "reset_failed":
            self.mark_dead("reset_failed")
            raise SandboxDied(f"sandbox {self._id} could not be reset: {message}")
        raise SandboxError(f"sandbox {self._id} refused a request ({kind}): {message}")

    def _exec_result(self, request: Frame, reply: CallReply, round_trip_s: float) -> ExecResult:
        op = request["op"]
        result = ExecResult(
            stdout=reply.stdout,
            stderr=reply.stderr,
            exit_code=reply.exit_code,
            duration_s=min(reply.duration_s, round_trip_s),
            round_trip_s=round_trip_s,
            truncated=reply.truncated,
        )
        labels = {"op": op}
        self._metrics.observe(m.ROUND_TRIP, round_trip_s, labels)
        self._metrics.observe(m.COMMAND, result.duration_s, labels)
        if result.truncated:
            self._metrics.increment(m.TRUNCATED, labels)
        if reply.oom:
            self.oom_kills += 1
            self._metrics.increment(m.OOM_KILLS, labels)
            raise SandboxOOM(f"the {op} call was killed for using too much memory", result)
        if reply.timed_out:
            self.timeouts += 1
            self._metrics.increment(m.TIMEOUTS, labels)
            raise SandboxTimeout(f"{op} call killed at its {request['timeout']} s timeout", result)
        return result

    def _finish_reset(self, reply: Frame, start: float) -> None:
        if self._executor is not None:
            self._executor = (self._executor[0], reply.get("oom_kills"))
        self._python.close()  # the next Python call meets the fresh worker
        self.timeouts = 0
        self._metrics.observe(m.RESET, time.perf_counter() - start)


def _base64(content: bytes | str) -> str:
    data = content.encode() if isinstance(content, str) else content
    return base64.b64encode(data).decode()


def _graded(reply: Frame, paths: dict[str, str]) -> Graded:
    """The executor's grading reply; anything malformed is the executor's failure."""
    files = reply.get("files")
    try:
        if not isinstance(files, dict) or set(files) != set(paths):
            raise ValueError(f"files {sorted(files or ())} for {sorted(paths)}")
        return Graded(
            exit_code=int(reply["exit_code"]),
            timed_out=bool(reply["timed_out"]),
            duration_s=float(reply["duration_s"]),
            output=str(reply["output"]),
            files={
                paths[path]: None if data is None else base64.b64decode(data)
                for path, data in files.items()
            },
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise SandboxError(f"the executor's grading reply is broken: {exc}") from exc


def _holds(reply: Frame, count: int) -> tuple[bool, ...]:
    holds = reply.get("holds")
    if not isinstance(holds, list) or len(holds) != count:
        raise SandboxError(f"the verifier answered {holds!r} for {count} checks")
    return tuple(value is True for value in holds)
