"""A sandbox for unit tests of other packages: the real executor as a plain host process.

**No isolation at all.** ``FakeSandbox`` runs the same executor as the Docker box
(``sandboxes.agent``), but as a child process of the test on the host: commands run as
the test's user, with the host's network, tools and file system. It exists so that
``tests/unit`` of envs and server can run real shell and Python calls fast and without
Docker. Its real twin is ``sandboxes.docker.DockerSandboxPool``, exercised in
``tests/docker``. Never point it at untrusted code.

What matches the Docker box: the ``Sandbox`` calls and their results, timeouts that kill
the command's process group (``SandboxTimeout``), the output cap (``truncated``), a
persistent Python namespace, checks (``verify``), ``reset`` (wipes the work and tmp
folders, kills what the box started, fresh namespace), ``SandboxDied`` once the box is
gone (``kill()``). Not reproduced: the users (agent, verifier and executor are all the
test's user, and checks run with nothing frozen), so nothing here is out of the reach of
the code under test.

Paths: each box gets a private temp folder. ``write_file``/``read_file`` (and a
grading's files) map ``WORK_DIR`` (``/work``), ``TMP_DIR`` (``/tmp``) and the config's
``verifier_dirs`` onto it, so env code uses the same paths as with Docker; other absolute
paths are refused (``seed_dir`` is not reproduced). Commands start in the mapped work
folder with ``$HOME`` and ``$TMPDIR`` set to the mapped folders, so envs should write
commands with relative paths, ``~`` or ``$TMPDIR`` (a literal ``/work/x`` inside a shell
command or Python code is *not* mapped). Not reproduced: limits (memory, pids, CPU), the
network ban, the read-only root, OOM detection.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from rollgym.sandboxes import agent

from .base import TMP_DIR, WORK_DIR, SandboxDied, SandboxError, SandboxFileError
from .box import ExecutorSandbox
from .config import PoolConfig, SandboxConfig
from .metrics import MetricsSink
from .pool import WarmPool

FOLDER_PREFIX = "rollgym-fake-"
SOCKET_NAME = "executor.sock"


class FakeSandbox(ExecutorSandbox):
    """One host-process box in a private temp folder. Use it as a context manager.

    ``kill()`` SIGKILLs the executor, as if the container died: the next call raises
    ``SandboxDied``.
    """

    def __init__(self, config: SandboxConfig | None = None, *, metrics: MetricsSink | None = None):
        config = config or SandboxConfig()
        self.root = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-"))
        self.work_dir, self.tmp_dir = self.root / "work", self.root / "tmp"
        self.work_dir.mkdir()
        self.tmp_dir.mkdir()
        self.verifier_dirs = {
            folder: self.root / "verifier" / folder.strip("/") for folder in config.verifier_dirs
        }
        for host_dir in self.verifier_dirs.values():
            host_dir.mkdir(parents=True, mode=0o700)
        socket_path = str(self.root / SOCKET_NAME)
        super().__init__(
            f"fake-{uuid.uuid4().hex[:8]}",
            socket_path,
            config,
            executor_uid=os.getuid(),
            metrics=metrics,
            map_path=self._host_path,
        )
        self._process = self._launch(socket_path, config)
        try:
            self._wait_until_listening(socket_path, config.start_timeout_s)
            self.ping()
        except BaseException:
            self.close()
            raise

    def _launch(self, socket_path: str, config: SandboxConfig) -> subprocess.Popen[bytes]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            "HOME": str(self.work_dir),
            "TMPDIR": str(self.tmp_dir),
            "PYTHONPATH": str(Path(agent.__file__).parent.parent),
            **config.environment,
        }
        command = [
            sys.executable, "-B", "-m", "agent.executor",
            "--socket", socket_path,
            "--work-dir", str(self.work_dir),
            "--wipe", str(self.work_dir),
            "--wipe", str(self.tmp_dir),
            "--python-grace", str(config.python_grace_s),
            "--exit-with-parent",
            *(arg for folder in self.verifier_dirs.values() for arg in ("--verifier-dir", str(folder))),
        ]  # fmt: skip
        log = open(self.root / "executor.log", "wb")  # noqa: SIM115 - the child keeps it
        with log:
            return subprocess.Popen(
                command, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True,
            )  # fmt: skip

    def _wait_until_listening(self, socket_path: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not os.path.exists(socket_path):
            if self._process.poll() is not None:
                log = (self.root / "executor.log").read_text(errors="replace")
                raise SandboxError(
                    f"the fake executor exited with {self._process.returncode}: {log}"
                )
            if time.monotonic() > deadline:
                raise SandboxError(f"the fake executor did not listen within {timeout} s")
            time.sleep(0.002)

    def _host_path(self, path: str) -> str:
        """Map a box path (``/work/...``, ``/tmp/...``, or relative) onto this box's folder."""
        absolute = posixpath.normpath(posixpath.join(WORK_DIR, path))
        folders = {WORK_DIR: self.work_dir, TMP_DIR: self.tmp_dir, **self.verifier_dirs}
        for box_dir, host_dir in folders.items():
            if absolute == box_dir or absolute.startswith(box_dir + "/"):
                return str(host_dir / posixpath.relpath(absolute, box_dir))
        raise SandboxFileError(f"{path}: the fake sandbox only maps {sorted(folders)}")

    def kill(self) -> None:
        """SIGKILL the executor, as if the box died from outside."""
        with _gone_is_fine():
            os.killpg(self._process.pid, signal.SIGKILL)
        self._process.wait()

    def close(self) -> None:
        if self._process.poll() is None:
            with _gone_is_fine():
                # The executor ends what the box started, then the executor itself goes.
                self._call({"op": "reset"}, self._config.reset_timeout_s)
            self.kill()
        super().close()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> FakeSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _gone_is_fine:
    """Suppress the errors of touching something that already died."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> bool:
        return kind is not None and issubclass(kind, (ProcessLookupError, SandboxDied))


class HostProcessProvider:
    """A ``BoxProvider`` of ``FakeSandbox``es (for ``FakeSandboxPool``)."""

    def __init__(self, config: SandboxConfig, metrics: MetricsSink | None = None) -> None:
        self.config = config
        self.metrics = metrics

    def open(self) -> None:
        pass

    def start_box(self) -> ExecutorSandbox:
        return FakeSandbox(self.config, metrics=self.metrics)

    def stop_box(self, box: ExecutorSandbox) -> None:
        box.close()

    def sweep(self) -> int:
        """Remove temp folders of earlier test processes that died without closing."""
        removed = 0
        for folder in Path(tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}*-*"):
            owner = folder.name.removeprefix(FOLDER_PREFIX).split("-", 1)[0]
            if owner.isdigit() and not _process_exists(int(owner)):
                shutil.rmtree(folder, ignore_errors=True)
                removed += 1
        return removed

    def close(self) -> None:
        pass


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class FakeSandboxPool(WarmPool):
    """A ``WarmPool`` of ``FakeSandbox``es: the real pool logic over host processes.

    No isolation (see the module docstring); for unit tests only.
    """

    def __init__(self, config: PoolConfig | None = None, *, metrics: MetricsSink | None = None):
        config = config or PoolConfig(size=2, health_interval_s=0)
        super().__init__(HostProcessProvider(config.box, metrics), config, metrics=metrics)
