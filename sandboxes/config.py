"""Typed, validated-once configuration of a box and of a pool of them.

``SandboxConfig`` is one box: its image, its hardening and limits, its users, and the
defaults of every call. Hardened by default (network none, every capability dropped but
the three the executor needs to stay apart from agent code, no-new-privileges, read-only
root with tmpfs work dirs, memory/CPU/pids limits, agent and verifier users of their
own, an init); a network is only ever there when ``network="bridge"`` is asked for. An
environment adjusts its box with ``with_overrides(...)``, validated again. A task's box
may start from files of its image (``seed_dir``, copied into the work dir at start and
after each reset) and have folders only its verifier may enter (``verifier_dirs``, where
tests and results go after the agent's episode). ``PoolConfig`` is the pool: its size,
waits, runtime folder and a ``SandboxConfig``.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .base import TMP_DIR, WORK_DIR

# A unix socket path must fit in 108 bytes; the pool adds "/<pool>/<box>/executor.sock".
MAX_RUNTIME_DIR_LENGTH = 60
# Memory the executor and its Python worker need, on top of the tmpfs folders' contents.
EXECUTOR_RESERVE_MB = 32


# Folders a verifier folder may not be: the system's, and the box's own mounts.
RESERVED_DIRS = frozenset(
    {"/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/opt", "/proc", "/root", "/run",
     "/sbin", "/sys", "/usr", "/var", "/home", "/srv", "/mnt", "/media", WORK_DIR, TMP_DIR}
)  # fmt: skip


def default_runtime_dir() -> str:
    """A short host folder for the boxes' sockets: ``/tmp/rollgym-sbx-<uid>``."""
    return f"/tmp/rollgym-sbx-{os.getuid()}"


class SandboxConfig(BaseModel):
    """One box. Sizes in MiB, times in seconds, output and file caps in bytes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    image: str = "rollgym/sandbox-python:latest"
    network: Literal["none", "bridge"] = Field(
        "none", description="'bridge' gives the box a network; ask for it only when needed"
    )
    memory_mb: int = Field(512, ge=32, description="memory limit (no swap on top)")
    cpus: float = Field(1.0, gt=0, le=64)
    cpuset: str | None = Field(
        None,
        pattern=r"^\d+(-\d+)?(,\d+(-\d+)?)*$",
        description="the cores the box may run on, as Docker's --cpuset-cpus ('1', '0-3,6'); "
        "default: any",
    )
    oci_runtime: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        description="the engine's OCI runtime for the box (Docker's --runtime: 'runsc' for "
        "gVisor, 'kata' for Kata Containers, once the engine has it); default: the engine's",
    )
    pids_limit: int = Field(128, ge=16, description="processes and threads in the box")
    uid: int = Field(61000, ge=1, description="the agent's user: commands run as it")
    gid: int = Field(61000, ge=1, description="the agent's group (the verifier's too)")
    verifier_uid: int = Field(
        61001, ge=1, description="the user a task's checks run as, apart from the agent"
    )
    work_dir_mb: int = Field(256, ge=1, description=f"tmpfs size of {WORK_DIR}")
    tmp_dir_mb: int = Field(128, ge=1, description=f"tmpfs size of {TMP_DIR}")
    shm_mb: int = Field(64, ge=1, description="size of /dev/shm")
    environment: dict[str, str] = Field(default_factory=dict)
    command_timeout_s: float = Field(30.0, gt=0, description="default per-call timeout")
    output_limit_bytes: int = Field(1 << 16, ge=1, description="cap per stream per call")
    max_file_bytes: int = Field(16 << 20, ge=1, description="largest file read_file returns")
    python_grace_s: float = Field(
        0.5, gt=0, description="a timed-out Python call's time to obey SIGINT before a kill"
    )
    host_grace_s: float = Field(
        5.0, gt=0, description="how long past a command's timeout the host waits for an answer"
    )
    start_timeout_s: float = Field(60.0, gt=0, description="create + start + first answer")
    reset_timeout_s: float = Field(10.0, gt=0)
    orphan_grace_s: float = Field(
        30.0, gt=0, description="a box with no host connected this long ends itself"
    )
    seed_dir: str | None = Field(
        None,
        description=f"a folder of the image copied into {WORK_DIR} (owned by the agent) when "
        "the box starts and after every reset: a task's starting files",
    )
    verifier_dirs: tuple[str, ...] = Field(
        (),
        description="folders only the verifier may enter (tmpfs, mode 0700, emptied by "
        "reset): where a task's tests and its verifier's results go (Harbor: /tests, /logs)",
    )
    verifier_dir_mb: int = Field(16, ge=1, description="tmpfs size of each verifier folder")

    @field_validator("environment")
    @classmethod
    def _no_reserved_variables(cls, env: dict[str, str]) -> dict[str, str]:
        reserved = {"HOME", "TMPDIR", "PATH"} & env.keys()
        if reserved:
            raise ValueError(f"{sorted(reserved)} are set by the sandbox; remove them")
        return env

    @field_validator("seed_dir")
    @classmethod
    def _absolute_seed(cls, path: str | None) -> str | None:
        if path is not None and (not os.path.isabs(path) or os.path.normpath(path) == "/"):
            raise ValueError(f"seed_dir must be an absolute folder other than /, got {path!r}")
        return path

    @field_validator("verifier_dirs")
    @classmethod
    def _own_verifier_dirs(cls, paths: tuple[str, ...]) -> tuple[str, ...]:
        for path in paths:
            clean = os.path.normpath(path)
            if not os.path.isabs(path) or clean != path or clean.count("/") != 1:
                raise ValueError(
                    f"verifier_dirs are top-level absolute folders like '/tests', got {path!r}"
                )
            if clean in RESERVED_DIRS:
                raise ValueError(f"{path} is a system or sandbox folder, not a verifier folder")
        if len(set(paths)) != len(paths):
            raise ValueError(f"verifier_dirs {list(paths)} name a folder twice")
        return paths

    @model_validator(mode="after")
    def _apart_and_within_memory(self) -> SandboxConfig:
        if self.verifier_uid == self.uid:
            raise ValueError("verifier_uid must differ from uid: checks run apart from the agent")
        files_mb = self.work_dir_mb + self.tmp_dir_mb + self.shm_mb
        files_mb += self.verifier_dir_mb * len(self.verifier_dirs)
        if files_mb + EXECUTOR_RESERVE_MB > self.memory_mb:
            raise ValueError(
                f"work_dir_mb + tmp_dir_mb + shm_mb = {files_mb} MiB of files held in memory "
                f"leaves less than {EXECUTOR_RESERVE_MB} MiB of memory_mb={self.memory_mb} to "
                "the executor: raise memory_mb or shrink the folders"
            )
        return self

    def with_overrides(self, **changes: Any) -> SandboxConfig:
        """A validated copy with ``changes`` (an environment's own needs)."""
        return SandboxConfig.model_validate({**self.model_dump(), **changes})


class RemoteHost(BaseModel):
    """A Docker engine on another host, reached over TCP with client certificates.

    ``relay_uid`` is the user of the relay that carries the host's connections in each
    box (``sandboxes.agent.relay``).

    >>> RemoteHost(url="tcp://10.0.0.7:2376", cert_dir="/etc/rollgym/tls").relay_uid
    61002
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str = Field(description="the engine's TLS listener, tcp://HOST:PORT")
    cert_dir: str = Field(
        description="a folder with ca.pem (the engine's CA), cert.pem and key.pem (this "
        "client's certificate, signed by that CA): DOCKER_CERT_PATH's layout"
    )
    relay_uid: int = Field(
        61002,
        ge=1,
        description="the user, in each box, of the relay that carries the host's connections "
        "to the executor: a uid of its own, apart from the agent's and the verifier's",
    )

    @field_validator("url")
    @classmethod
    def _tcp_url(cls, url: str) -> str:
        if not url.startswith("tcp://"):
            raise ValueError(
                f"a remote Docker host is reached as tcp://HOST:PORT with TLS, got {url!r}; "
                "for this machine's engine use the local backend"
            )
        return url

    @field_validator("cert_dir")
    @classmethod
    def _absolute_cert_dir(cls, path: str) -> str:
        if not os.path.isabs(path):
            raise ValueError(f"cert_dir must be an absolute folder, got {path!r}")
        return path


class PoolConfig(BaseModel):
    """A warm pool of ``size`` boxes built from ``box``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    size: int = Field(4, ge=1, le=1024, description="boxes kept warm; also the most in use")
    acquire_timeout_s: float = Field(60.0, gt=0, description="default wait for a free box")
    start_parallelism: int = Field(8, ge=1, le=64, description="boxes started at once")
    recycle_after_timeout: bool = Field(
        True, description="retire a box whose command timed out instead of resetting it"
    )
    health_interval_s: float = Field(
        10.0, ge=0, description="how often idle boxes are pinged; 0 turns it off"
    )
    runtime_dir: str = Field(default_factory=default_runtime_dir)
    labels: dict[str, str] = Field(default_factory=dict, description="extra container labels")
    remote: RemoteHost | None = Field(
        None, description="the Docker host that runs the boxes; None: this machine's engine"
    )
    box: SandboxConfig = Field(default_factory=SandboxConfig)

    @field_validator("runtime_dir")
    @classmethod
    def _short_absolute_path(cls, path: str) -> str:
        if not os.path.isabs(path):
            raise ValueError(f"runtime_dir must be absolute, got {path!r}")
        if len(path) > MAX_RUNTIME_DIR_LENGTH:
            raise ValueError(
                f"runtime_dir {path!r} is {len(path)} characters; unix socket paths must fit "
                f"in 108 bytes, so keep it under {MAX_RUNTIME_DIR_LENGTH}"
            )
        return path

    @field_validator("labels")
    @classmethod
    def _no_reserved_labels(cls, labels: dict[str, str]) -> dict[str, str]:
        reserved = [key for key in labels if key.startswith("rollgym.")]
        if reserved:
            raise ValueError(f"labels {reserved} use the reserved 'rollgym.' prefix")
        return labels


class ImagePoolConfig(BaseModel):
    """A pool of boxes of many images (``ImagePool``): warm boxes per image, one cap.

    Every box counts against ``max_boxes`` (idle, leased or starting) and its
    ``memory_mb`` against ``max_memory_mb``; when a box of an image is wanted and the
    caps are reached, the least recently used idle box of another image is stopped. An
    image keeps as many warm boxes as it had leased at once within ``demand_window_s``
    (``sandboxes.demand``); ``box`` is the default box (``acquire()`` with none named),
    of which ``warm_default`` are started with the pool and always kept.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_boxes: int = Field(16, ge=1, le=1024, description="boxes of all images at once")
    max_memory_mb: int | None = Field(
        None, ge=32, description="the sum of the boxes' memory limits; None: no cap"
    )
    warm_default: int = Field(0, ge=0, le=1024, description="default boxes always kept warm")
    demand_window_s: float = Field(
        120.0, gt=0, description="an image keeps the most boxes it had leased in this window"
    )
    acquire_timeout_s: float = Field(60.0, gt=0, description="default wait for a box")
    start_parallelism: int = Field(8, ge=1, le=64, description="boxes started at once")
    recycle_after_timeout: bool = Field(
        True, description="retire a box whose command timed out instead of resetting it"
    )
    health_interval_s: float = Field(
        10.0, ge=0, description="how often idle boxes are pinged and surplus stopped; 0: off"
    )
    runtime_dir: str = Field(default_factory=default_runtime_dir)
    labels: dict[str, str] = Field(default_factory=dict, description="extra container labels")
    remote: RemoteHost | None = Field(
        None, description="the Docker host that runs the boxes; None: this machine's engine"
    )
    box: SandboxConfig = Field(default_factory=SandboxConfig)

    @model_validator(mode="after")
    def _fits_its_caps(self) -> ImagePoolConfig:
        self.pool_config(self.box)  # the runtime folder and labels, as a one-image pool's
        if self.warm_default > self.max_boxes:
            raise ValueError(
                f"warm_default={self.warm_default} boxes do not fit in max_boxes={self.max_boxes}"
            )
        if self.max_memory_mb is not None:
            need = self.box.memory_mb * max(1, self.warm_default)
            if need > self.max_memory_mb:
                raise ValueError(
                    f"max_memory_mb={self.max_memory_mb} cannot hold {max(1, self.warm_default)} "
                    f"default boxes of {self.box.memory_mb} MiB"
                )
        return self

    def pool_config(self, box: SandboxConfig) -> PoolConfig:
        """The one-image settings of ``box``'s boxes (what a provider of them takes)."""
        return PoolConfig(
            size=1,
            runtime_dir=self.runtime_dir,
            labels=self.labels,
            recycle_after_timeout=self.recycle_after_timeout,
            remote=self.remote,
            box=box,
        )
