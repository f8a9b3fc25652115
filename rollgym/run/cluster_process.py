"""Run a cluster as a child process (``rollgym cluster up``): N servers behind one router.

The twin of ``ServerProcess`` for ``rollgym run --servers N``, the cluster benchmark and
the end-to-end tests: the router listens on a free loopback port and speaks the API of one
server, so whatever drives a ``ServerProcess`` drives this the same way::

    with ClusterProcess(servers=2, model_dir=..., data_dir=run_dir / "cluster") as cluster:
        with ServerClient(cluster.client_config()) as client:
            client.policy_version()

Leaving the ``with`` block sends SIGTERM: the router stops every server and the local Ray
cluster it started. If it has to be killed instead, its whole process group goes: Ray's
reaper ends the GCS, the raylet and the servers with the router, but not Ray's two agent
processes, which stay in the router's process group.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from rollgym.run.server_process import ServerProcess


class ClusterProcess(ServerProcess):
    """``rollgym cluster up`` as a child process (see the module docstring)."""

    command = ("cluster", "up")
    follows_parent = False  # `rollgym cluster up` takes no --parent-pipe

    def __init__(
        self,
        *,
        servers: int,
        model_dir: Path,
        data_dir: Path,
        log_path: Path | None = None,
        admin_token: str | None = None,
        settings: dict[str, str] | None = None,
        threads: int | None = None,
        cpus_per_server: float = 1.0,
        startup_timeout_s: float = 900.0,
        stop_timeout_s: float = 180.0,
    ) -> None:
        """``threads`` caps each server's OpenMP threads; ``settings``: extra ``ROLLGYM_*``
        variables for the router (``ROLLGYM_CLUSTER__*``) and the servers (the others)."""
        super().__init__(
            model_dir=model_dir,
            data_dir=data_dir,
            log_path=log_path or data_dir / "cluster.log",
            admin_token=admin_token,
            settings=settings,
            threads=threads,
            startup_timeout_s=startup_timeout_s,
            stop_timeout_s=stop_timeout_s,
        )
        self.servers = servers
        self.cpus_per_server = cpus_per_server

    def _location(self) -> dict[str, str]:
        return {
            "ROLLGYM_CLUSTER__HOST": "127.0.0.1",
            "ROLLGYM_CLUSTER__PORT": str(self.port),
            "ROLLGYM_CLUSTER__DATA_DIR": str(self.data_dir),
            "ROLLGYM_CLUSTER__SERVERS": str(self.servers),
            "ROLLGYM_CLUSTER__CPUS_PER_SERVER": str(self.cpus_per_server),
        }

    def stop(self) -> None:
        """SIGTERM, then SIGKILL for the router's whole process group (see above)."""
        group = self.pid  # the child leads its own session, so its pid names its group
        super().stop()
        if group is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)  # anything of Ray that outlived the router
