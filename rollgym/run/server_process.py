"""Run the rollout server as a child process (``rollgym serve``) on a free loopback port.

``rollgym run``, the benchmarks and the end-to-end tests start the server as its own
process (in its own interpreter: the vLLM engine and the trainer's torch never share one), configured through its ``ROLLGYM_*`` environment
variables, and talk to it over HTTP like any other client::

    with ServerProcess(model_dir=..., data_dir=run_dir / "server") as server:
        with ServerClient(server.client_config()) as client:
            client.policy_version()

Leaving the ``with`` block stops the server (SIGTERM, then SIGKILL after a grace period);
its output goes to ``log_path``. ``kill`` is a crash (SIGKILL to the server and its engine
process, no shutdown); ``start`` again brings it back on the same port and data dir. The
server stops itself when this process dies, even by SIGKILL: it holds a pipe whose other
end only this process has (``rollgym serve --parent-pipe``), so no server and no boxes are
left running after a killed run.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from pydantic import SecretStr

from rollgym.run.cores import pin_process
from rollgym.trainer.client import ServerClient
from rollgym.trainer.config import ClientConfig
from rollgym.trainer.errors import ServerUnavailable

# vLLM on CPU: a fixed KV-cache budget and the engine core in-process (see notes/vllm-cpu.md)
ENGINE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """A ``rollgym serve`` child process; a context manager (see the module docstring)."""

    command: tuple[str, ...] = ("serve",)
    follows_parent = True  # the command takes --parent-pipe (see the module docstring)

    def __init__(
        self,
        *,
        model_dir: Path,
        data_dir: Path,
        log_path: Path | None = None,
        admin_token: str | None = None,
        settings: dict[str, str] | None = None,
        threads: int | None = None,
        cores: set[int] | None = None,
        startup_timeout_s: float = 300.0,
        stop_timeout_s: float = 30.0,
    ) -> None:
        """``settings``: extra ``ROLLGYM_*`` variables, e.g. ``{"ROLLGYM_ENGINE__SEED": "1"}``.

        ``threads`` caps the engine's OpenMP threads. On a small CPU machine shared with the
        trainer, give each process its own cores: OpenMP threads that outnumber the cores
        spin at barriers, and a GRPO step measured here took 3x longer with both processes
        on all cores than with one core each. ``cores`` pins the server (and so its engine)
        to those cores (``rollgym.run.cores``).
        """
        self.model_dir = model_dir
        self.data_dir = data_dir
        self.log_path = log_path or data_dir / "server.log"
        self.admin_token = admin_token or secrets.token_urlsafe(24)
        self.settings = dict(settings or {})
        self.threads = threads
        self.cores = cores
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._lifeline: int | None = None  # our end of the server's --parent-pipe

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client_config(self, **overrides: object) -> ClientConfig:
        return ClientConfig.model_validate(
            {"url": self.url, "admin_token": SecretStr(self.admin_token), **overrides}
        )

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start the server and return once ``/health`` answers."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()  # a restart keeps its port: clients reconnect
        env = {
            **os.environ,
            **ENGINE_ENV,
            **self._location(),
            "ROLLGYM_ADMIN_TOKEN": self.admin_token,
            "ROLLGYM_ENGINE__MODEL_DIR": str(self.model_dir),
            **({"OMP_NUM_THREADS": str(self.threads)} if self.threads else {}),
            **self.settings,
        }
        command = [sys.executable, "-m", "rollgym.cli", *self.command]
        lifeline = None
        if self.follows_parent:  # both ends are closed in any other child (non-inheritable)
            lifeline, self._lifeline = os.pipe()
            command += ["--parent-pipe", str(lifeline)]
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                command,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C in the terminal reaches us, not it
                pass_fds=() if lifeline is None else (lifeline,),
            )
        if lifeline is not None:
            os.close(lifeline)
        if self.cores is not None:  # before it starts its engine (a child) or any thread
            pin_process(self.cores, self._process.pid)
        self._wait_ready()

    def _location(self) -> dict[str, str]:
        """The variables that say where the child listens and keeps its data."""
        return {
            "ROLLGYM_HOST": "127.0.0.1",
            "ROLLGYM_PORT": str(self.port),
            "ROLLGYM_DATA_DIR": str(self.data_dir),
        }

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        with ServerClient(
            self.client_config(request_timeout_s=5.0, reconnect_timeout_s=0)
        ) as client:
            while True:
                if self._process is not None and self._process.poll() is not None:
                    raise ServerUnavailable(
                        f"the server exited with code {self._process.returncode} while "
                        f"starting; its log ({self.log_path}) ends with:\n{self.log_tail()}"
                    )
                try:
                    client.policy_version()
                    return
                except ServerUnavailable:
                    if time.monotonic() > deadline:
                        self.stop()
                        raise ServerUnavailable(
                            f"the server did not answer within {self.startup_timeout_s:.0f}s; "
                            f"log tail:\n{self.log_tail()}"
                        ) from None
                    time.sleep(0.5)

    def stop(self) -> None:
        """Stop the server: SIGTERM, then SIGKILL after ``stop_timeout_s``."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._cut_lifeline()

    def kill(self) -> None:
        """A crash: SIGKILL to the server's process group (its engine process included)."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        self._cut_lifeline()

    def _cut_lifeline(self) -> None:
        lifeline, self._lifeline = self._lifeline, None
        if lifeline is not None:
            os.close(lifeline)

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_path.is_file():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
