"""One shell command per call: a fresh ``bash -c`` in its own session, killed by group.

Each command starts in the work dir with the executor's environment, as the agent's user
(``identities``), its stdin the call's data or nothing; nothing but files carries over
between calls (no ``cd`` or ``export`` memory). A command that outlives its timeout is
SIGKILLed with every process in its group. Background processes it started may keep
running (a server the next command talks to); ``reset`` ends them.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from typing import Any

from .identity import Identities
from .processes import KILLED, exit_code_of, kill_group, reap
from .result import CallResult
from .streams import CappedOutput, Outcome, drain, pump

CANNOT_START = 126  # the shell's own code for "found but could not run"


def run_shell(
    command: str,
    *,
    shell: str,
    cwd: str,
    timeout: float,
    cap: int,
    host: socket.socket | None = None,
    stdin: bytes = b"",
    identities: Identities | None = None,
    as_verifier: bool = False,
    env: dict[str, str] | None = None,
) -> tuple[CallResult, int | None]:
    """Run ``command``; return its result and its process group id (None if it never ran).

    It runs as the agent, or as the verifier with ``as_verifier`` (a task's tests, once
    the agent is gone); ``env`` replaces the executor's environment.
    """
    user: dict[str, Any] = {}
    if identities is not None:
        user = identities.verifier_process() if as_verifier else identities.agent_process()
    start = time.monotonic()
    data = _stdin_file(stdin) if stdin else subprocess.DEVNULL
    try:
        proc = subprocess.Popen(
            [shell, "-c", command],
            cwd=cwd,
            stdin=data,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env=env,
            **user,
        )
    except OSError as exc:  # no process to be had (the box's limit), or no shell
        message = f"rollgym: cannot start the command: {exc}\n"
        return CallResult(CANNOT_START, "", message, False, time.monotonic() - start), None
    finally:
        if data != subprocess.DEVNULL:
            os.close(data)
    if identities is not None and not as_verifier:
        identities.mark_agent(proc.pid)
    assert proc.stdout is not None and proc.stderr is not None
    out, err = CappedOutput(cap), CappedOutput(cap)
    outputs = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    for fd in outputs:
        os.set_blocking(fd, False)
    pidfd = os.pidfd_open(proc.pid)
    try:
        outcome = pump(outputs, pidfd, start + timeout, host)
        if outcome is not Outcome.DONE:
            kill_group(proc.pid)
        status = reap(proc.pid)
        drain(outputs)
    finally:
        os.close(pidfd)
        proc.stdout.close()
        proc.stderr.close()
    exit_code = KILLED if status is None else exit_code_of(os.waitstatus_to_exitcode(status))
    proc.returncode = exit_code  # reaped (or given up on) here: Popen must not wait for it
    result = CallResult(
        exit_code=exit_code,
        stdout=out.text(),
        stderr=err.text(),
        truncated=out.truncated or err.truncated,
        duration_s=time.monotonic() - start,
        timed_out=outcome is not Outcome.DONE,
    )
    return result, proc.pid


def _stdin_file(data: bytes) -> int:
    """A memory file holding ``data``, read from its start: a command's stdin that never
    blocks us, however little of it the command reads."""
    fd = os.memfd_create("stdin")
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
