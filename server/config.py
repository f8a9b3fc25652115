"""Typed, validated-once configuration: one model per component, one settings root.

``ServerSettings`` reads flags' values, then ``ROLLGYM_*`` environment variables (nested
fields with ``__``), then defaults::

    ROLLGYM_HOST=127.0.0.1  ROLLGYM_PORT=8000  ROLLGYM_ADMIN_TOKEN=...  ROLLGYM_DATA_DIR=...
    ROLLGYM_ENGINE__MODEL_DIR=/models/x  ROLLGYM_ENGINE__IN_FLIGHT=abort
    ROLLGYM_BUFFER__LEASE_TIMEOUT_S=120  ROLLGYM_SESSIONS__IDLE_TIMEOUT_S=600
    ROLLGYM_SANDBOXES__POOL_SIZE=4  ROLLGYM_SANDBOXES__RUNTIME_DIR=/tmp/rollgym-sbx-compose
    ROLLGYM_MAX_BODY_BYTES=262144  ROLLGYM_WEIGHTS__MAX_NORM_RATIO=10
    ROLLGYM_ENV_ACCESS__AGENT_ENV_IDS='["rollgym/GuessNumber-v0"]'
    ROLLGYM_AGENTS__KEYS='{"alice": "..."}'  ROLLGYM_AGENTS__KEYS_FILE=/run/secrets/agent-keys
    ROLLGYM_AGENTS__DEFAULT_QUOTA__MAX_SANDBOXES=1  ROLLGYM_AGENTS__ALLOW_ANONYMOUS=false

Each component gets its own model (``BufferConfig``, ``SessionConfig``...; the engine's are
``rollgym.engine.config``), never the root.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from rollgym.contract import paths
from rollgym.contract.shape import GroupsPerBatch, MaxStaleness
from rollgym.engine.config import EngineConfig, WeightCheckConfig
from rollgym.engine.precision import admitted_verdict
from rollgym.sandboxes.config import RemoteHost
from rollgym.server.access.agent_keys import AgentKeysConfig
from rollgym.server.access.env_access import EnvAccessConfig
from rollgym.server.http.auth import AdminToken


class _Config(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class BufferConfig(_Config):
    """The durable trajectory buffer (SQLite in WAL mode under the data dir)."""

    lease_timeout_s: float = Field(
        300.0, gt=0, description="a pulled group not acked by then is handed out again"
    )
    file_name: str = "buffer.sqlite3"
    archive_retention_s: float | None = Field(
        None,
        ge=0,
        description="how long trained and stale groups stay in the archive for export: "
        "None keeps them for good, 0 keeps none (see server.buffer.archive)",
    )


class SessionConfig(_Config):
    """External-agent sessions.

    Each session group (a lone session is a group of one) takes one group of the staleness
    window's budget from its first session until it is persisted, like a rollout group.
    While a rollout job runs, its window governs; with none, ``max_staleness`` and
    ``groups_per_batch`` here size it. A full window answers 429 with ``Retry-After:
    retry_after_s``.
    """

    idle_timeout_s: float = Field(600.0, gt=0, description="a session idle this long expires")
    sweep_interval_s: float = Field(5.0, gt=0)
    max_sessions: int = Field(256, ge=1)
    group_timeout_s: float = Field(
        1800.0,
        gt=0,
        description="a group not settled this long after its first session opened is settled "
        "with what it has: its valid episodes if at least 2, else set aside as invalid",
    )
    # The window with no job running, in the run shape's types (rollgym.contract.shape; each
    # session group names its own size): wide by default, for many agents at once.
    max_staleness: MaxStaleness = 1
    groups_per_batch: GroupsPerBatch = 32
    retry_after_s: int = Field(5, ge=1, description="Retry-After of a 429 for a full window")


class RunnerConfig(_Config):
    """The rollout runner."""

    max_concurrent_episodes: int = Field(
        512, ge=1, description="a hard cap on episodes at once, on top of admission control"
    )


class SandboxSettings(_Config):
    """The shared sandbox pool for sandboxed environments; 0 boxes means no pool.

    ``pool_size`` boxes of the default image are kept warm. With ``max_boxes`` > 0 the
    pool serves boxes of any image (envs whose tasks bring their own, such as Harbor
    tasks: ``rollgym.sandboxes.image_pool``) under that cap, the default image's
    ``pool_size`` boxes included, and ``max_memory_mb`` caps their memory limits' sum.
    ``backend`` says where the boxes run: ``local``, this machine's Docker engine (the
    executor on a unix socket in a host folder), or ``remote``, the Docker host named by
    ``remote`` (its TLS listener and client certificates; the executor reached through
    the engine: docs/cluster.md).
    """

    backend: Literal["local", "remote"] = Field(
        "local", description="local: this machine's Docker engine; remote: the host in remote"
    )
    remote: RemoteHost | None = Field(None, description="with backend=remote: the Docker host")
    pool_size: int = Field(0, ge=0, le=1024)
    max_boxes: int = Field(
        0, ge=0, le=1024, description="boxes of all images at once; 0: the default image only"
    )
    max_memory_mb: int | None = Field(
        None, ge=32, description="with max_boxes: the sum of the boxes' memory limits"
    )
    image: str | None = Field(None, description="default: the sandboxes package's image")
    acquire_timeout_s: float = Field(60.0, gt=0)
    cpuset: str | None = Field(
        None, description="the cores the boxes run on (e.g. '1' or '2-3'); default: any"
    )
    runtime_dir: str | None = Field(
        None,
        description="the boxes' socket folder (default: the sandboxes package's); in a "
        "container, bind-mount it at the same path on the Docker host",
    )

    @model_validator(mode="after")
    def _remote_when_remote(self) -> SandboxSettings:
        if self.backend == "remote" and self.remote is None:
            raise ValueError(
                "backend=remote needs the host: set sandboxes.remote.url and "
                "sandboxes.remote.cert_dir (ROLLGYM_SANDBOXES__REMOTE__URL, ...__CERT_DIR)"
            )
        if self.backend == "local" and self.remote is not None:
            raise ValueError(
                "sandboxes.remote is set but backend is local: set backend=remote to use it, "
                "or remove it"
            )
        return self

    @model_validator(mode="after")
    def _default_boxes_fit(self) -> SandboxSettings:
        if self.max_boxes and self.pool_size > self.max_boxes:
            raise ValueError(
                f"pool_size={self.pool_size} warm boxes do not fit in max_boxes={self.max_boxes}"
            )
        return self

    @field_validator("runtime_dir")
    @classmethod
    def _usable_runtime_dir(cls, path: str | None) -> str | None:
        if path is not None:
            from rollgym.sandboxes.config import PoolConfig

            PoolConfig(runtime_dir=path)  # absolute and short enough for unix sockets
        return path


class DashboardConfig(_Config):
    """The live dashboard (``/dashboard``): how often it reads the server, how much it keeps."""

    interval_s: float = Field(2.0, gt=0, description="one reading of the server this often")
    history_s: float = Field(3600.0, gt=0, description="readings and stage spans kept")
    latency_window_s: float = Field(60.0, gt=0, description="window of the latency series")
    trainer_reports: int = Field(10_000, ge=1, description="trainer step reports kept")


class CostConfig(_Config):
    """The cost board (``server.observability.cost``): the machine's price and the rates' window."""

    price_per_hour: float | None = Field(
        None, ge=0, description="price of one machine-hour (any currency); None: costs unset"
    )
    window_s: float = Field(60.0, gt=0, description="window of the tokens/s rates")


class ServerSettings(BaseSettings):
    """Everything ``rollgym serve`` needs; see the module docstring for the variables."""

    model_config = SettingsConfigDict(
        env_prefix="ROLLGYM_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        hide_input_in_errors=True,  # the input holds the admin token and the agent keys
    )

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    admin_token: AdminToken = Field(description="bearer token of the admin routes")
    data_dir: Path = Field(
        default_factory=lambda: paths.data_home() / "server",
        description="the SQLite buffer and staged weights live here",
    )
    max_weight_bytes: int = Field(16 << 30, gt=0, description="largest weight upload")
    max_body_bytes: int = Field(
        256 << 10,
        ge=1024,
        description="largest request body of every other route; a longer one is refused "
        "with 413 while it streams. A body is parsed and validated on the event loop, so "
        "this bounds what one request can stall the others for (about 30 ms for 256 KiB of "
        "token ids on a loaded 2-core machine); 256 KiB holds a 64k-token chat",
    )
    weights: WeightCheckConfig = Field(default_factory=WeightCheckConfig)
    env_access: EnvAccessConfig = Field(default_factory=EnvAccessConfig)
    agents: AgentKeysConfig = Field(
        default_factory=AgentKeysConfig,
        description="agent keys and quotas (server.access.agent_keys)",
    )
    engine: EngineConfig = Field(default_factory=EngineConfig)
    tool_parser: str = Field(
        "hermes",
        min_length=1,
        description="vLLM's tool parser of the served model's family (a --tool-call-parser "
        "name: hermes, llama3_json, mistral, qwen3_coder...); `rollgym run` and `rollgym "
        "doctor` take the model catalog's for a catalog model",
    )
    buffer: BufferConfig = Field(default_factory=BufferConfig)
    sessions: SessionConfig = Field(default_factory=SessionConfig)
    runner: RunnerConfig = Field(default_factory=RunnerConfig)
    sandboxes: SandboxSettings = Field(default_factory=SandboxSettings)
    dashboard: DashboardConfig = Field(default_factory=DashboardConfig)
    cost: CostConfig = Field(default_factory=CostConfig)

    @model_validator(mode="after")
    def _precision_admitted(self) -> ServerSettings:
        admitted_verdict(self.engine)  # raises, with the command to run, when not admitted
        return self

    @model_validator(mode="after")
    def _admin_token_is_no_agent_key(self) -> ServerSettings:
        admin = self.admin_token.get_secret_value()
        if any(s.get_secret_value() == admin for s in self.agents.secrets().values()):
            raise ValueError("an agent key equals the admin token: give agents their own keys")
        return self

    @property
    def buffer_path(self) -> Path:
        return self.data_dir / self.buffer.file_name

    @property
    def staging_dir(self) -> Path:
        """Uploads in transit; whatever a restart finds here was cut off, and is removed."""
        return self.data_dir / "staging"

    @property
    def policy_dir(self) -> Path:
        """The last applied weights and their version, kept beside the buffer."""
        return self.data_dir / "policy"

    @property
    def rollout_job_path(self) -> Path:
        """The running rollout job, resumed after a restart."""
        return self.data_dir / "rollout-job.json"
