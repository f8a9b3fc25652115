"""The engine's configuration, validated once: one model per component.

``EngineConfig`` is the in-process vLLM engine (with ``SpeculationConfig``, its n-gram
drafter under a gate); ``WeightCheckConfig`` the checks of new weights' values. The
server's settings hold them as ``ROLLGYM_ENGINE__*`` and ``ROLLGYM_WEIGHTS__*``
(``rollgym.server.config.ServerSettings``); ``rollgym eval`` and the benchmarks build them
alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rollgym.contract import paths
from rollgym.contract.adapter import LORA_RANKS
from rollgym.contract.wire import SamplingSettings

InFlightPolicy = Literal["finish", "abort"]


class _Config(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SpeculationConfig(_Config):
    """vLLM's n-gram speculative decoding, under a gate (``engine.vllm.speculation``).

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


class LoraServingConfig(_Config):
    """Serve LoRA adapters on a fixed base model (vLLM's LoRA serving) instead of taking
    whole weights: each update is an adapter, each version its own adapter name.

    On the 2-core CPU machine it did not pay (``bench.lora``, docs/benchmarks.md): an engine
    serving an adapter sampled 2.5-2.7x slower than the plain model (SmolLM2 and the
    default model), while the whole-weights update it saves took 0.7 s a step on SmolLM2.
    It pays where pushes are costly against sampling: large models, slow links, many
    servers.
    """

    max_rank: int = Field(
        16, description=f"the largest adapter rank taken, one of vLLM's sizes {LORA_RANKS}"
    )
    max_loaded: int = Field(
        3,
        ge=2,
        le=64,
        description="adapters kept loaded: the serving one and older ones that requests "
        "started on still use (unloaded once idle)",
    )

    @field_validator("max_rank")
    @classmethod
    def _vllm_size(cls, rank: int) -> int:
        if rank not in LORA_RANKS:
            raise ValueError(f"must be one of vLLM's sizes {LORA_RANKS}, not {rank}")
        return rank


class EngineConfig(_Config):
    """The in-process vLLM engine.

    ``in_flight`` is what a weight update does to requests already running: ``finish``
    lets them complete on the old weights (the update waits), ``abort`` stops them and
    runs them again from the start on the new weights (nothing is mixed: every
    generation comes from exactly one version). ``weight_transfer="nccl"`` enables vLLM's
    native NCCL transfer for GPU hosts (the trainer broadcasts, ``trainer.broadcast``) and
    ``"gloo"`` the same transfer over gloo, its CPU twin (``engine.vllm.gloo_transfer``);
    ``reload`` (safetensors files) works everywhere.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)

    model_dir: Path = Field(default_factory=paths.default_model_dir)
    served_model_name: str | None = Field(None, description="default: the model dir's name")
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32"
    training_dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32",
        description="the trainer's precision: serving below it needs the red line's verdict "
        "(engine.precision)",
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
    weight_transfer: Literal["reload", "nccl", "gloo"] = "reload"
    staged_updates: bool = Field(
        True,
        description="load a file update into a second copy of the weights while the old "
        "ones serve, so that only the swap pauses the engine (engine.vllm.staging); needs "
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
    lora: LoraServingConfig | None = Field(
        None, description="serve LoRA adapters on the base model; None: take whole weights"
    )

    @field_validator("model_dir")
    @classmethod
    def _has_config(cls, path: Path) -> Path:
        if not (path / "config.json").is_file():
            raise ValueError(
                f"{path} holds no model (no config.json): run `rollgym model init` "
                "or point --model-dir at a Hugging Face model directory"
            )
        return path

    @model_validator(mode="after")
    def _lora_alone(self) -> EngineConfig:
        if self.lora is not None and (
            self.speculation.enabled or self.weight_transfer != "reload" or self.quantization
        ):
            raise ValueError(
                "engine.lora serves adapters on a fixed base: it does not combine with "
                "speculation, a weight broadcast (nccl, gloo) or quantization"
            )
        return self

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.model_dir.name


class WeightCheckConfig(_Config):
    """Checks of new weights' values before the swap (names, shapes and dtypes are always
    checked; so is finiteness: a NaN or infinite value is refused, naming the tensor)."""

    max_norm_ratio: float | None = Field(
        None,
        gt=1,
        description="refuse a tensor whose L2 norm changes by more than this factor against "
        "the served one (either way); None: no norm check",
    )
