"""A task's checks, run by the verifier: another user, the agent frozen, exit codes only.

Checks decide rewards, so nothing the agent runs may reach them. For each batch:

1. **freeze** every agent process (SIGSTOP; one that keeps being resumed is killed):
   nothing the agent started can move, swap a file or answer in a check's place while
   the verifier looks;
2. run each check as the **verifier user** (another uid, in the agent's group: it reads
   the agent's files as data, as any member of that group would; agent processes cannot
   signal, ptrace or read it), in the work dir, with a clean environment whose ``HOME`` is
   not the agent's, the env's data on its stdin, under its own timeout. A check holds when
   it exits 0, as ``waitpid`` says: nothing is parsed from its output;
3. kill whatever the check left behind (every process of the verifier user);
4. **thaw** what step 1 stopped.

A check that cannot even start (the agent used up the box's process limit) does not
hold: the agent's doing. In the fake sandbox (no users to switch) checks run as the
executor's own user and nothing is frozen.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

from .identity import Identities
from .processes import kill_group, kill_users, processes_of, reap

FREEZE_DEADLINE_S = 1.0
STOPPED = "TtZX"  # stopped, traced, zombie, dead: nothing that runs
VERIFIER_HOME = "/"  # read-only and the agent's dotfiles are not there
BARE_ENVIRONMENT = ("PATH", "LANG", "TMPDIR")


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
        os.kill(pid, signum)


def freeze(uid: int) -> set[int]:
    """SIGSTOP every process of ``uid`` (children forked meanwhile too); return them.

    Stopped processes cannot resume each other, but one still running can: every round
    stops whatever of ``uid`` runs. A process still running at the deadline (agent
    processes resuming each other faster than we stop them) is killed instead.
    """
    stopped: set[int] = set()
    deadline = time.monotonic() + FREEZE_DEADLINE_S
    while running := {pid for pid, state in processes_of(uid) if state not in STOPPED}:
        signum = signal.SIGSTOP if time.monotonic() < deadline else signal.SIGKILL
        for pid in running:
            _signal(pid, signum)
        stopped |= running
        time.sleep(0.0005)
    return stopped


def thaw(pids: set[int]) -> None:
    for pid in pids:
        _signal(pid, signal.SIGCONT)


class Verifier:
    """Runs batches of checks for the executor (see the module docstring)."""

    def __init__(self, identities: Identities, shell: str, cwd: str) -> None:
        self.identities = identities
        self.shell = shell
        self.cwd = cwd
        self.environment = dict(os.environ)
        if identities.switching:
            self.environment = {k: v for k, v in os.environ.items() if k in BARE_ENVIRONMENT}
            self.environment["HOME"] = VERIFIER_HOME

    def run(self, checks: list[tuple[str, bytes, float]]) -> list[bool]:
        """Whether each ``(command, stdin, timeout)`` holds, the agent frozen meanwhile."""
        agent = self.identities.agent
        frozen = freeze(agent.uid) if agent is not None else set()
        try:
            return [self._check(*check) for check in checks]
        finally:
            thaw(frozen)

    def _check(self, command: str, stdin: bytes, timeout: float) -> bool:
        try:
            proc = subprocess.Popen(
                [self.shell, "-c", command],
                cwd=self.cwd,
                env=self.environment,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                **self.identities.verifier_process(),
            )
        except OSError:  # no process to be had: the agent used up the box's limit
            return False
        try:
            proc.communicate(stdin, timeout=timeout)
            holds = proc.returncode == 0
        except subprocess.TimeoutExpired:
            holds = False
        finally:
            kill_group(proc.pid)
            reap(proc.pid)
            if self.identities.verifier is not None:
                kill_users(self.identities.verifier.uid)
        return holds
