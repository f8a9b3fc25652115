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

Each component gets its own model (``EngineConfig``, ``BufferConfig``...), never the root.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from rollgym.contract import paths
from rollgym.contract.wire import SamplingSettings
from rollgym.server.agent_keys import AgentKeysConfig
from rollgym.server.env_access import EnvAccessConfig

InFlightPolicy = Literal["finish", "abort"]


class _Config(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SpeculationConfig(_Config):
    """vLLM's n-gram speculative decoding, under a gate (``server.engine.speculation``).

    Off by default: drafts pay only on repetitive output. When on, the engine starts plain
    and the gate replays vLLM's drafter over what it serves; once those drafts would be
    accepted at ``min_acceptance`` or more and would make decoding ``tolerance`` faster (a
    drafting step takes ``draft_step_cost`` plain steps' time until a try measures it), it
    switches to an engine with the drafter, and back to a plain one when the measured
    acceptance falls under ``min_acceptance`` or tokens per busy second fall more than
    ``tolerance`` under the plain rate; drafting is then not tried again for
    ``probe_after_s`` (doubling while tries fail).
    """

    enabled: bool = False
    gate: bool = Field(True, description="False: draft always (benchmarks, tests)")
    num_speculative_tokens: int = Field(3, ge=1, le=16)
    prompt_lookup_max: int = Field(3, ge=1)
    prompt_lookup_min: int = Field(1, ge=1)
    min_acceptance: float = Field(0.3, ge=0, le=1)
    tolerance: float = Field(0.05, ge=0, lt=1, description="rate drop allowed vs plain")
    window_tokens: int = Field(2048, ge=32, description="a window closes after this many...")
    window_s: float = Field(10.0, gt=0, description="...or this many busy seconds")
    probe_after_s: float = Field(60.0, gt=0, description="wait after a failed try of drafting")
    draft_step_cost: float = Field(
        2.0,
        gt=0,
        description="a drafting engine's step over a plain one's, per request, until a try "
        "measures it (bench.cost prints it per workload)",
    )

    @model_validator(mode="after")
    def _lookup(self) -> SpeculationConfig:
        if self.prompt_lookup_min > self.prompt_lookup_max:
            raise ValueError("speculation.prompt_lookup_min must be <= prompt_lookup_max")
        return self


class EngineConfig(_Config):
    """The in-process vLLM engine.

    ``in_flight`` is what a weight update does to requests already running: ``finish``
    lets them complete on the old weights (the update waits), ``abort`` stops them and
    runs them again from the start on the new weights (nothing is mixed: every
    generation comes from exactly one version). ``weight_transfer="nccl"`` enables vLLM's
    native NCCL transfer for GPU hosts; ``reload`` (safetensors files) works everywhere.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)

    model_dir: Path = Field(default_factory=paths.default_model_dir)
    served_model_name: str | None = Field(None, description="default: the model dir's name")
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32"
    training_dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32",
        description="the trainer's precision: serving below it needs the red line's verdict "
        "(server.precision)",
    )
    quantization: Literal["fp8"] | None = Field(
        None, description="FP8 weights (vLLM's GPU build only); gated like a lower dtype"
    )
    enforce_eager: bool = True
    max_model_len: int = Field(2048, ge=64)
    kv_cache_gib: float = Field(1.0, gt=0, description="KV-cache space")
    max_num_seqs: int = Field(256, ge=1, description="sequences the engine batches at once")
    enable_prefix_caching: bool = True
    block_size: int = Field(
        32,
        ge=16,
        multiple_of=16,
        description="KV block size; the prefix cache reuses whole blocks, so short episodes "
        "need small ones (vLLM's CPU default of 128 reuses nothing under 128 tokens)",
    )
    logprobs_mode: Literal["processed_logprobs", "raw_logprobs"] = Field(
        "processed_logprobs",
        description="processed: the distribution actually sampled (after temperature/top-p)",
    )
    seed: int = 0
    in_flight: InFlightPolicy = "finish"
    weight_transfer: Literal["reload", "nccl"] = "reload"
    staged_updates: bool = Field(
        True,
        description="load a file update into a second copy of the weights while the old "
        "ones serve, so that only the swap pauses the engine (server.engine.staging); needs "
        "memory for that copy while it loads. False reloads in place inside the pause",
    )
    sampling: SamplingSettings = Field(
        default_factory=SamplingSettings, description="defaults of the OpenAI routes"
    )
    warmup: bool = Field(True, description="run one sampled request with logprobs at start")
    swap_timeout_s: float = Field(
        300.0,
        gt=0,
        description="deadline of one weight swap (load, pause, swap, cache reset); past it "
        "the old weights are restored and the update answers 503",
    )
    speculation: SpeculationConfig = Field(default_factory=SpeculationConfig)

    @field_validator("model_dir")
    @classmethod
    def _has_config(cls, path: Path) -> Path:
        if not (path / "config.json").is_file():
            raise ValueError(
                f"{path} holds no model (no config.json): run `rollgym model init` "
                "or point --model-dir at a Hugging Face model directory"
            )
        return path

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.model_dir.name


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
        "None keeps them for good, 0 keeps none (see server.archive)",
    )


class WeightCheckConfig(_Config):
    """Checks of new weights' values before the swap (names, shapes and dtypes are always
    checked; so is finiteness: a NaN or infinite value is refused, naming the tensor)."""

    max_norm_ratio: float | None = Field(
        None,
        gt=1,
        description="refuse a tensor whose L2 norm changes by more than this factor against "
        "the served one (either way); None: no norm check",
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
    max_staleness: int = Field(1, ge=0, description="the window with no rollout job running")
    groups_per_batch: int = Field(32, ge=1, description="the window with no rollout job running")
    retry_after_s: int = Field(5, ge=1, description="Retry-After of a 429 for a full window")


class RunnerConfig(_Config):
    """The rollout runner."""

    max_concurrent_episodes: int = Field(
        512, ge=1, description="a hard cap on episodes at once, on top of admission control"
    )


class SandboxSettings(_Config):
    """The shared sandbox pool for sandboxed environments; 0 boxes means no pool."""

    pool_size: int = Field(0, ge=0, le=1024)
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
    """The cost board (``server.cost``): the machine's price and the rates' window."""

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
    admin_token: SecretStr = Field(description="bearer token of the admin routes")
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
        default_factory=AgentKeysConfig, description="agent keys and quotas (server.agent_keys)"
    )
    engine: EngineConfig = Field(default_factory=EngineConfig)
    buffer: BufferConfig = Field(default_factory=BufferConfig)
    sessions: SessionConfig = Field(default_factory=SessionConfig)
    runner: RunnerConfig = Field(default_factory=RunnerConfig)
    sandboxes: SandboxSettings = Field(default_factory=SandboxSettings)
    dashboard: DashboardConfig = Field(default_factory=DashboardConfig)
    cost: CostConfig = Field(default_factory=CostConfig)

    @model_validator(mode="after")
    def _precision_admitted(self) -> ServerSettings:
        from rollgym.server.precision import admitted_verdict

        admitted_verdict(self.engine)  # raises, with the command to run, when not admitted
        return self

    @model_validator(mode="after")
    def _admin_token_is_no_agent_key(self) -> ServerSettings:
        admin = self.admin_token.get_secret_value()
        if any(s.get_secret_value() == admin for s in self.agents.secrets().values()):
            raise ValueError("an agent key equals the admin token: give agents their own keys")
        return self

    @field_validator("admin_token")
    @classmethod
    def _strong_token(cls, token: SecretStr) -> SecretStr:
        if len(token.get_secret_value()) < 16:
            raise ValueError("admin_token must be at least 16 characters (ROLLGYM_ADMIN_TOKEN)")
        return token

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
