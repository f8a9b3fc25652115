"""``DockerProvider``: hardened containers, each running the executor, for a ``WarmPool``.

A box is a container started from ``SandboxConfig`` (network none, every capability
dropped but SETUID, SETGID and KILL, no-new-privileges, read-only root, tmpfs ``/work``
and ``/tmp``, memory/CPU/pids limits, ``--init``) whose main process is the executor,
running as root so that it can run agent commands as the agent's user and checks as the
verifier's, and stay out of reach of both. The host reaches it through unix sockets in
a per-box folder bind-mounted at ``/run/rollgym``: no network and no ``docker exec`` on
the per-call path. That folder belongs to this process's user, mode 0700: the executor
makes its sockets there with this user's file-system identity, the agent's user cannot
even enter it, so nothing in the box can write to the host's disk or put its own socket
or link where the host connects. The executor's code is a read-only bind mount of a copy
made in the pool's runtime folder, so the runtime folder is the only host path the
Docker engine must see (keep it the same path for this process and the engine when the
pool itself runs in a container).

Every container is labelled (``rollgym.sandbox``, ``rollgym.pool``, ``rollgym.owner``)
and removed by the engine when it exits; a box whose host connections have all been
gone for ``orphan_grace_s`` ends itself, so an owner killed without a chance to clean up
leaves no container running. ``sweep`` removes what dead owners left (their folders,
containers still in their grace), and ``close`` removes everything of this pool. Docker
SDK errors are translated to ``SandboxError``.
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from docker.models.containers import Container
from docker.types import LogConfig, Mount

import docker

from .. import agent
from ..agent.identity import User
from ..base import TMP_DIR, WORK_DIR, SandboxError
from ..box import ExecutorSandbox
from ..config import PoolConfig, SandboxConfig
from ..metrics import MetricsSink
from .engine import docker_errors, engine_client
from .owner import Owner
from .relay import ExecRelay, code_archive

LABEL = "rollgym.sandbox"
LABEL_POOL = "rollgym.pool"
LABEL_OWNER = "rollgym.owner"
BOX_RUNTIME_DIR = "/run/rollgym"
BOX_AGENT_DIR = "/opt/rollgym/agent"
SOCKET_NAME = "executor.sock"
OWNER_FILE = "owner"
AGENT_VOLUME = "rollgym-sbx-{pool}-agent"  # a remote engine's copy of the executor's code
# Async calls on relayed boxes in flight at once (a thread each, made as they are needed).
RELAY_THREADS = 256
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
STATUS_CHECK_INTERVAL_S = 0.1
EXECUTOR_UID = 0  # root in the box (no user namespace): what SO_PEERCRED shows the host
# What the executor needs and nothing else: run commands as other users, and signal them.
EXECUTOR_CAPABILITIES = ["SETUID", "SETGID", "KILL"]
AGENT_WRITABLE = (WORK_DIR, TMP_DIR, "/dev/shm", "/dev/mqueue")  # all that reset wipes
# The container's main process: restart the executor when a signal ended it (the OOM
# killer may pick it), after killing every other process but the init. Only a shell
# builtin runs meanwhile, and the shell is too small for the OOM killer to want it.
KEEPER = 'while :; do "$@"; code=$?; [ "$code" -gt 128 ] || exit "$code"; kill -9 -1; done'

logger = logging.getLogger(__name__)


def container_spec(
    config: SandboxConfig, box_dir: Path, agent_dir: Path, host: User
) -> dict[str, Any]:
    """Keyword arguments of ``containers.create`` for one hardened box owned by ``host``."""
    mounts = [
        Mount(BOX_RUNTIME_DIR, str(box_dir), type="bind"),
        Mount(BOX_AGENT_DIR, str(agent_dir), type="bind", read_only=True),
    ]
    return _spec(config, host, mounts, {}, relayed=False)


def relayed_spec(config: SandboxConfig, agent_volume: str, relay: User) -> dict[str, Any]:
    """The spec of a box on a remote engine: no host folder in it. Its sockets lie in a
    tmpfs that only the relay's user may enter; the executor's code is a volume of the
    engine's, read-only."""
    mounts = [Mount(BOX_AGENT_DIR, agent_volume, type="volume", read_only=True)]
    runtime = f"rw,noexec,nosuid,nodev,size=1m,uid={relay.uid},gid={relay.gid},mode=0700"
    return _spec(config, relay, mounts, {BOX_RUNTIME_DIR: runtime}, relayed=True)


def _spec(
    config: SandboxConfig,
    host: User,
    mounts: list[Mount],
    runtime_tmpfs: dict[str, str],
    *,
    relayed: bool,
) -> dict[str, Any]:
    command = [
        "sh", "-c", KEEPER, "rollgym-keeper",
        "python3", "-B", "-m", "agent.executor",
        "--socket", f"{BOX_RUNTIME_DIR}/{SOCKET_NAME}",
        "--work-dir", WORK_DIR,
        *(arg for folder in AGENT_WRITABLE for arg in ("--wipe", folder)),
        "--python-grace", str(config.python_grace_s),
        "--contained",
        "--agent-user", f"{config.uid}:{config.gid}",
        "--verifier-user", f"{config.verifier_uid}:{config.gid}",
        "--host-user", str(host),
        "--orphan-after", str(config.orphan_grace_s),
        *(arg for folder in config.verifier_dirs for arg in ("--verifier-dir", folder)),
        *(("--seed", config.seed_dir) if config.seed_dir else ()),
        *(("--relayed",) if relayed else ()),
    ]  # fmt: skip
    tmpfs_opts = "rw,exec,nosuid,nodev"
    # The verifier's own folders: only it may enter them (a grading's tests and results).
    verifier_tmpfs = {
        folder: f"{tmpfs_opts},size={config.verifier_dir_mb}m,uid={config.verifier_uid},"
        f"gid={config.gid},mode=0700"
        for folder in config.verifier_dirs
    }
    return {
        "image": config.image,
        "command": command,
        "working_dir": str(Path(BOX_AGENT_DIR).parent),
        "user": f"{EXECUTOR_UID}:{EXECUTOR_UID}",
        "environment": {
            "HOME": WORK_DIR,
            "TMPDIR": TMP_DIR,
            "PATH": PATH,
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            **config.environment,
        },
        "network_mode": config.network,
        "cap_drop": ["ALL"],
        "cap_add": EXECUTOR_CAPABILITIES,
        "security_opt": ["no-new-privileges"],
        "read_only": True,
        "tmpfs": {
            WORK_DIR: f"{tmpfs_opts},size={config.work_dir_mb}m,uid={config.uid},gid={config.gid},mode=0755",
            TMP_DIR: f"{tmpfs_opts},size={config.tmp_dir_mb}m,mode=1777",
            **verifier_tmpfs,
            **runtime_tmpfs,
        },
        "shm_size": f"{config.shm_mb}m",
        "mem_limit": f"{config.memory_mb}m",
        "memswap_limit": f"{config.memory_mb}m",  # the same figure: no swap on top
        "nano_cpus": int(config.cpus * 1e9),
        "cpuset_cpus": config.cpuset,
        "runtime": config.oci_runtime,
        "pids_limit": config.pids_limit,
        "init": True,
        "auto_remove": True,  # a box that ends itself leaves nothing behind
        "mounts": mounts,
        "log_config": LogConfig(type="json-file", config={"max-size": "1m"}),
    }


class DockerProvider:
    """Starts and stops the containers of one pool. Thread-safe.

    With ``config.remote`` the boxes run on that Docker host: nothing of theirs is on
    this machine's disk (their sockets are in a tmpfs of the box, the executor's code in
    a volume of that engine, ``AGENT_VOLUME``), and each connection to a box goes through
    the engine (``relay``).
    """

    def __init__(
        self,
        config: PoolConfig,
        *,
        metrics: MetricsSink | None = None,
        client: docker.DockerClient | None = None,
    ) -> None:
        self.config = config
        self.pool_id = uuid.uuid4().hex[:8]
        self.owner = Owner.me()
        self.host = User(os.getuid(), os.getgid())
        self.runtime_dir = Path(config.runtime_dir) / self.pool_id
        self.agent_volume = AGENT_VOLUME.format(pool=self.pool_id)
        self._metrics = metrics
        self._client = client
        self._own_client = client is None
        self._names = itertools.count()
        self._lock = threading.Lock()
        self._containers: dict[str, tuple[Container, Path | None]] = {}
        self._relay_calls: ThreadPoolExecutor | None = None

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            raise SandboxError("the provider is not open")
        return self._client

    @property
    def labels(self) -> dict[str, str]:
        return {
            **self.config.labels,
            LABEL: "1",
            LABEL_POOL: self.pool_id,
            LABEL_OWNER: self.owner.encode(),
        }

    def open(self) -> None:
        box, remote = self.config.box, self.config.remote
        if self.host.uid in (box.uid, box.verifier_uid):
            raise SandboxError(
                f"this process runs as uid {self.host.uid}, which is also the box's agent or "
                f"verifier user ({box.uid}, {box.verifier_uid}): agent code could then write "
                "to this user's folders. Run as another user or set SandboxConfig.uid and "
                "verifier_uid to uids of their own"
            )
        if remote is not None and remote.relay_uid in (EXECUTOR_UID, box.uid, box.verifier_uid):
            raise SandboxError(
                f"RemoteHost.relay_uid={remote.relay_uid} is also the executor's, the agent's "
                "or the verifier's user: give the relay a uid of its own"
            )
        if self._client is None:
            self._client = engine_client(remote)
        with docker_errors("connecting to the Docker engine"):
            self._client.ping()
        if remote is not None:
            self._fill_agent_volume()
            self._relay_calls = ThreadPoolExecutor(
                max_workers=RELAY_THREADS,
                thread_name_prefix=f"relay-{self.pool_id}",
            )
            return
        self.runtime_dir.mkdir(parents=True, mode=0o700)
        (self.runtime_dir / OWNER_FILE).write_text(self.owner.encode())
        agent_dir = self.runtime_dir / "agent"
        agent_dir.mkdir()
        for source in Path(agent.__file__).parent.glob("*.py"):
            shutil.copyfile(source, agent_dir / source.name)
        for path in (agent_dir, *agent_dir.iterdir()):
            path.chmod(0o755 if path.is_dir() else 0o644)

    def _fill_agent_volume(self) -> None:
        """The executor's code in a volume of the remote engine, for every box to mount.

        A container that never runs holds the volume while the code is copied in."""
        with docker_errors(f"copying the executor's code to {self.agent_volume}"):
            self.client.volumes.create(self.agent_volume, labels=self.labels)
            holder = self.client.containers.create(
                self.config.box.image,
                command=["true"],
                network_mode="none",
                labels=self.labels,
                mounts=[Mount(BOX_AGENT_DIR, self.agent_volume, type="volume")],
            )
            try:
                holder.put_archive(BOX_AGENT_DIR, code_archive(Path(agent.__file__).parent))
            finally:
                holder.remove(force=True)

    def start_box(self) -> ExecutorSandbox:
        box_id = f"{self.pool_id}-{next(self._names):03d}"
        remote = self.config.remote
        box_dir: Path | None = None
        if remote is None:
            folder = box_dir = self.runtime_dir / box_id
            folder.mkdir(mode=0o700)  # ours alone: the executor acts as us to make its sockets
            spec = container_spec(self.config.box, folder, self.runtime_dir / "agent", self.host)
        else:
            relay = User(remote.relay_uid, remote.relay_uid)
            spec = relayed_spec(self.config.box, self.agent_volume, relay)
        try:
            # create + start, not run(): run() answers a missing image with a pull, which
            # waits on a registry that may not be there.
            with docker_errors(f"creating sandbox {box_id}"):
                container = self.client.containers.create(
                    name=f"rollgym-sbx-{box_id}", labels=self.labels, **spec
                )
        except SandboxError:
            if box_dir is not None:
                shutil.rmtree(box_dir, ignore_errors=True)
            raise
        with self._lock:
            self._containers[box_id] = (container, box_dir)
        try:
            with docker_errors(f"starting sandbox {box_id}"):
                container.start()
            if box_dir is None:
                return self._reach_relayed(box_id, container)
            socket_path = box_dir / SOCKET_NAME
            self._wait_for_socket(container, socket_path)
            box = ExecutorSandbox(
                box_id,
                str(socket_path),
                self.config.box,
                executor_uid=EXECUTOR_UID,
                metrics=self._metrics,
                restarts=True,
            )
            box.ping()
        except BaseException:
            self._remove(box_id)
            raise
        return box

    def _reach_relayed(self, box_id: str, container: Container) -> ExecutorSandbox:
        """The box's first answer, through a relay that waits for the executor's socket."""
        assert self.config.remote is not None and self._relay_calls is not None
        relay = ExecRelay(
            self.client.api,
            container.id,
            relay_uid=self.config.remote.relay_uid,
            listener_uid=EXECUTOR_UID,
            calls=self._relay_calls,
        )
        box = ExecutorSandbox(
            box_id,
            f"{BOX_RUNTIME_DIR}/{SOCKET_NAME}",
            self.config.box,
            executor_uid=EXECUTOR_UID,
            metrics=self._metrics,
            restarts=True,
            relay=relay,
        )
        try:
            box.ping(timeout=self.config.box.start_timeout_s)
        except SandboxError:
            self._check_starting(container)  # the box's own words, if it exited
            raise
        return box

    def _wait_for_socket(self, container: Container, socket_path: Path) -> None:
        start = time.monotonic()
        deadline = start + self.config.box.start_timeout_s
        next_check = start + STATUS_CHECK_INTERVAL_S
        while not socket_path.exists():
            now = time.monotonic()
            if now > deadline:
                raise SandboxError(
                    f"sandbox executor did not listen within {deadline - start:.0f} s"
                )
            if now > next_check:
                next_check = now + STATUS_CHECK_INTERVAL_S
                self._check_starting(container)
            time.sleep(0.002)

    @staticmethod
    def _check_starting(container: Container) -> None:
        try:
            with docker_errors("checking a starting sandbox"):
                container.reload()
                if container.status in ("created", "running"):
                    return
                logs = container.logs(tail=20).decode(errors="replace")
        except SandboxError as exc:  # removed on exit before we could look
            if "No such container" not in str(exc) and "404" not in str(exc):
                raise
            raise SandboxError("sandbox exited while starting (and was removed)") from exc
        raise SandboxError(f"sandbox exited while starting ({container.status}): {logs}")

    def stop_box(self, box: ExecutorSandbox) -> None:
        box.close()
        self._remove(box.id)

    def _remove(self, box_id: str) -> None:
        with self._lock:
            container, box_dir = self._containers.pop(box_id, (None, None))
        if container is not None:
            self._remove_container(container.id)
        if box_dir is not None:
            shutil.rmtree(box_dir, ignore_errors=True)

    def sweep(self) -> int:
        """Remove containers and runtime folders whose owning process died."""
        removed = 0
        for summary in self._list({"label": LABEL}):
            owner = Owner.decode((summary.get("Labels") or {}).get(LABEL_OWNER, ""))
            if owner is not None and owner.is_gone():
                self._remove_container(summary["Id"])
                removed += 1
        if self.config.remote is not None:
            self._sweep_volumes()
        elif self.runtime_dir.parent.is_dir():
            for folder in self.runtime_dir.parent.iterdir():
                owner_file = folder / OWNER_FILE
                if folder.is_dir() and owner_file.is_file():
                    owner = Owner.decode(owner_file.read_text())
                    if owner is not None and owner.is_gone():
                        shutil.rmtree(folder, ignore_errors=True)
        if removed:
            logger.info("swept %d sandbox containers of dead owners", removed)
        return removed

    def _sweep_volumes(self) -> None:
        with docker_errors("listing sandbox volumes"):
            volumes = self.client.api.volumes(filters={"label": LABEL})["Volumes"] or []
        for volume in volumes:
            owner = Owner.decode((volume.get("Labels") or {}).get(LABEL_OWNER, ""))
            if owner is not None and owner.is_gone():
                self._remove_volume(volume["Name"])

    def _remove_volume(self, name: str) -> None:
        try:
            with docker_errors(f"removing volume {name}"):
                self.client.api.remove_volume(name, force=True)
        except SandboxError as exc:
            if "no such volume" not in str(exc).lower():
                logger.warning("%s", exc)

    def _list(self, filters: dict[str, str]) -> list[dict[str, Any]]:
        """Container summaries (the low-level list: no per-container inspect that could
        race with a removal)."""
        with docker_errors("listing sandbox containers"):
            return list(self.client.api.containers(all=True, filters=filters))

    def _remove_container(self, container_id: str) -> None:
        try:
            with docker_errors(f"removing container {container_id[:12]}"):
                self.client.api.remove_container(container_id, force=True)
        except SandboxError as exc:
            if "No such container" not in str(exc) and "already in progress" not in str(exc):
                logger.warning("%s", exc)

    def close(self) -> None:
        with self._lock:
            box_ids = list(self._containers)
        for box_id in box_ids:
            self._remove(box_id)
        if self._client is not None:
            try:  # a last look, for a box whose start was cut short
                for summary in self._list({"label": f"{LABEL_POOL}={self.pool_id}"}):
                    self._remove_container(summary["Id"])
            except SandboxError as exc:
                logger.warning("could not check for leftover containers: %s", exc)
            if self.config.remote is not None:
                self._remove_volume(self.agent_volume)
            if self._own_client:
                self._client.close()
        if self._relay_calls is not None:
            self._relay_calls.shutdown(wait=False, cancel_futures=True)
        shutil.rmtree(self.runtime_dir, ignore_errors=True)
