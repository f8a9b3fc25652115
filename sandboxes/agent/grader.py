"""Grading: a task's own tests, run as the verifier once the agent is gone.

A Harbor task (and any task whose verifier is a script) is graded as its format says:
after the agent's episode its tests are copied into the box (``/tests``), ``test.sh``
runs, and it writes the reward to a file (``/logs/verifier/reward.txt``). Here that
happens out of the agent's reach:

1. the executor has **killed every agent process** first (the episode is over: nothing
   of the agent's can race the tests, swap a file or answer in their place) and given
   the box's folders their own mode back (a locked work dir cannot keep the tests out);
2. the **verifier folders** (tmpfs mounts the verifier owns, mode 0700: the agent could
   never enter them) are emptied, so nothing from an earlier grading is left;
3. the tests' files are written there **as the verifier**, and only there;
4. the command runs **as the verifier** in the given folder, with a bare environment,
   its output capped, killed with every verifier process at its timeout;
5. the files asked for are read back as the verifier (regular files only, capped) and
   returned to the host, which parses them as data.

What the tests run is the task's own business: a test that executes the agent's code
gives that code the verifier's rights for that run (it could write the reward file), as
in Harbor itself; rollgym's own checks never do that (``envs.programs.verify``).
"""

from __future__ import annotations

import base64
import os
import posixpath
import socket
import stat
from collections.abc import Sequence

from .framing import Frame
from .identity import Identities
from .processes import kill_users
from .shell import run_shell
from .wipe import WipedFolder

FILE_FLAGS = os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | os.O_NOFOLLOW
BARE_ENVIRONMENT = ("PATH", "LANG", "TMPDIR")
VERIFIER_HOME = "/"


class GradingError(Exception):
    """A grading request the executor refuses (a path outside the verifier folders...)."""


class Grader:
    """Runs gradings for the executor (see the module docstring)."""

    def __init__(self, identities: Identities, shell: str, folders: Sequence[WipedFolder]) -> None:
        self.identities = identities
        self.shell = shell
        self.folders = list(folders)
        self.environment = {k: v for k, v in os.environ.items() if k in BARE_ENVIRONMENT}
        self.environment["HOME"] = VERIFIER_HOME

    def run(self, req: Frame, host: socket.socket | None) -> Frame:
        """Empty the verifier folders, write the tests, run them, read the results back."""
        files = [(self._inside(str(f["path"])), f) for f in req.get("files", [])]
        reads = [self._inside(str(path)) for path in req.get("read", [])]
        for folder in self.folders:
            folder.reset(switching=self.identities.switching)
        for path, entry in files:
            self._write(path, base64.b64decode(entry["data"]))
        result, _ = run_shell(
            str(req["command"]),
            shell=self.shell,
            cwd=str(req["cwd"]),
            timeout=float(req["timeout"]),
            cap=int(req["cap"]),
            host=host,
            identities=self.identities,
            as_verifier=True,
            env={**self.environment, **{str(k): str(v) for k, v in req.get("env", {}).items()}},
        )
        if self.identities.verifier is not None:
            kill_users(self.identities.verifier.uid)  # whatever the tests left running
        limit = int(req["max_bytes"])
        return {
            "ok": True,
            "exit_code": result.exit_code,
            "timed_out": result.timed_out,
            "duration_s": result.duration_s,
            "output": (result.stdout + result.stderr)[-int(req["cap"]) :],
            "files": {path: self._read(path, limit) for path in reads},
        }

    def _inside(self, path: str) -> str:
        """``path``, normalized, if it lies inside a verifier folder."""
        clean = posixpath.normpath(path)
        for folder in self.folders:
            if clean.startswith(folder.path.rstrip("/") + "/"):
                return clean
        raise GradingError(f"{path} is not inside a verifier folder {self._paths()}")

    def _paths(self) -> list[str]:
        return [folder.path for folder in self.folders]

    def _write(self, path: str, data: bytes) -> None:
        with self.identities.as_verifier_files():
            os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | FILE_FLAGS, 0o755)
            try:
                with open(fd, "wb", closefd=False) as handle:
                    handle.write(data)
            finally:
                os.close(fd)

    def _read(self, path: str, limit: int) -> str | None:
        """The file's bytes (base64), None if it is not there; a non-file or an oversized
        one is refused (the tests wrote something that is not a result)."""
        try:
            with self.identities.as_verifier_files():
                fd = os.open(path, os.O_RDONLY | FILE_FLAGS)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise GradingError(f"cannot read {path}: {exc.strerror}") from exc
        with open(fd, "rb") as handle:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise GradingError(f"{path} is not a regular file")
            data = handle.read(limit + 1)
        if len(data) > limit:
            raise GradingError(f"{path} is larger than {limit} bytes")
        return base64.b64encode(data).decode()
