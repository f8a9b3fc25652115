"""Typed configuration for the trainer, validated once at construction.

Two configs, one per component:

* ``ClientConfig``: where the rollout server is and how to talk to it.
* ``TrainerConfig``: the GRPO run: batch shape, staleness window, optimisation, weight pushes,
  checkpoints. ``max_staleness`` picks the mode: ``0`` is synchronous (the trainer only
  takes samples from the weights it has just pushed), ``>= 1`` is asynchronous (sampling
  runs up to that many policy versions ahead of training).

Example::

    cfg = TrainerConfig(output_dir="runs/demo", group_size=8, groups_per_batch=4, max_staleness=1)
    cfg.mode            # "async"
    cfg.batch_size      # 32 trajectories per optimizer step
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from rollgym.contract.shape import RunShape
from rollgym.contract.staleness import StalenessUnit
from rollgym.trainer.canary import CanaryConfig
from rollgym.trainer.errors import TrainerConfigError
from rollgym.trainer.lora import LoraSettings

C = TypeVar("C", bound=BaseModel)
ImportanceSampling = Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]
LossType = Literal["dapo", "grpo", "dr_grpo", "bnpo"]
RewardScaling = Literal["group", "batch", "none"]
Schedule = Literal["constant", "cosine", "linear"]
Tracker = Literal["tensorboard", "wandb", "mlflow", "trackio"]


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ClientConfig(_Config):
    """How to reach the rollout server's HTTP API."""

    url: str = Field("http://127.0.0.1:8000", description="base URL of the rollout server")
    admin_token: SecretStr | None = Field(None, description="bearer token for /admin routes")
    request_timeout_s: float = Field(30.0, gt=0, description="timeout of ordinary calls")
    weights_timeout_s: float = Field(300.0, gt=0, description="timeout of one weight upload")
    reconnect_timeout_s: float = Field(
        600.0,
        ge=0,
        description="how long a call waits for a server that is gone or answers 503 (a "
        "restart) before it gives up; 0: no retry",
    )


class AlarmBounds(_Config):
    """Collapse alarms: the bound each per-step metric must keep (``max_``: at most, ``min_``:
    at least; None: not watched). A step that crosses one prints one warning line; the same
    metric warns again only after it has come back (``trainer.alarms``)."""

    max_kl_behaviour: float | None = Field(
        0.1, gt=0, description="KL(behaviour || trainer) on the sampled tokens"
    )
    max_entropy: float | None = Field(None, gt=0, description="mean entropy of sampled tokens")
    max_clip_ratio: float | None = Field(0.2, gt=0, description="share of tokens PPO clipped")
    min_is_ratio_p01: float | None = Field(0.1, gt=0, description="1st pct. of the IS ratio")
    max_is_ratio_p99: float | None = Field(5.0, gt=0, description="99th pct. of the IS ratio")
    max_grad_norm: float | None = Field(None, gt=0, description="gradient norm before clipping")
    max_zero_variance_groups: float | None = Field(
        None, ge=0, le=1, description="share of the batch's groups whose rewards are all equal"
    )


class OnlineEvalConfig(_Config):
    """Evaluation on the server every ``every`` steps (``trainer.online_eval``)."""

    every: int = Field(20, ge=1, description="optimizer steps between two evaluations")
    episodes: int = Field(64, ge=1, le=4096, description="held-out seeds, one episode each")
    first_seed: int = Field(
        20_000_000, ge=0, description="its seeds, apart from training's and the final evaluation's"
    )
    timeout_s: float = Field(600.0, gt=0, description="one evaluation's deadline")


class GuardConfig(_Config):
    """A rollback when online success falls ``margin`` below the best (needs online_eval)."""

    margin: float = Field(0.15, gt=0, le=1, description="success (0-1) below the best so far")
    lr_factor: float = Field(0.5, gt=0, lt=1, description="the learning rate after a rollback, x")


class BroadcastConfig(_Config):
    """Pushes broadcast to the servers (``trainer.broadcast``: vLLM's weight transfer, the
    trainer its rank 0) instead of uploaded; the servers run with the same
    ``engine.weight_transfer``."""

    backend: Literal["nccl", "gloo"] = Field(
        "nccl", description="nccl: GPU hosts; gloo: its CPU twin (the same engines, on TCP)"
    )
    address: str = Field(
        "127.0.0.1", description="where the servers reach the trainer's rendezvous"
    )
    port: int = Field(29500, gt=0, lt=65536, description="the rendezvous' port, on the trainer")
    servers: int = Field(1, ge=1, description="how many servers receive (one rank each)")
    timeout_s: float = Field(300.0, gt=0, description="the longest wait for every server")


class TrainerConfig(RunShape, _Config):
    """One GRPO run against a rollout server; see the module docstring for the two modes.

    The batch shape and the staleness window (``group_size``, ``groups_per_batch``,
    ``max_staleness``) are the run's shape, ``rollgym.contract.shape.RunShape``: the server's
    rollout job must have the same.
    """

    output_dir: Path = Field(description="checkpoints and logs of this run")
    # --- optimisation (TRL's GRPO loss)
    total_steps: int = Field(100, ge=1, description="optimizer steps of the whole run")
    learning_rate: float = Field(2e-4, gt=0)
    lr_schedule: Schedule = Field("constant", description="after the warm-up; decays reach 0")
    warmup_steps: int = Field(0, ge=0, description="linear learning-rate warm-up")
    adam_epsilon: float = Field(1e-8, gt=0)
    train_embeddings: bool = Field(
        True,
        description="train the token embeddings (and the output head). Off: Adam cannot drift "
        "the rows of tokens the policy never samples (see docs/training.md)",
    )
    weight_decay: float = Field(0.0, ge=0)
    gradient_checkpointing: bool = Field(
        True,
        description="recompute activations in the backward pass (TRL's default): less memory, "
        "one more forward's time per step",
    )
    mixed_precision: Literal["no", "bf16"] = Field(
        "no",
        description="bf16: forward and backward in bfloat16 under autocast, weights and "
        "optimizer in float32 (for GPUs; a CPU without bfloat16 units runs it slower)",
    )
    max_grad_norm: float = Field(1.0, gt=0)
    loss_type: LossType = "dapo"
    epsilon: float = Field(0.2, gt=0, description="PPO clip range (low side)")
    epsilon_high: float = Field(0.28, gt=0, description="PPO clip range (high side)")
    beta: float = Field(0.0, ge=0, description="KL weight to the start weights (0: no KL term)")
    scale_rewards: RewardScaling = Field(
        "group", description="divide advantages by the group's reward std, the batch's, or not"
    )
    temperature: float = Field(
        1.0, gt=0, description="sampling temperature; must match the rollout job's"
    )
    importance_sampling: ImportanceSampling = Field(
        "token_truncate", description="how the behaviour-logprob correction is applied"
    )
    importance_sampling_cap: float = Field(3.0, gt=1, description="upper bound of the IS ratio")
    staleness_unit: StalenessUnit = Field(
        "group",
        description="group: a group older than the window is dropped whole; turn: it is kept "
        "while its newest turn is in the window, its older turns masked from the loss "
        "(rollgym.contract.staleness, trainer.window)",
    )
    max_step_kl: float | None = Field(
        None,
        gt=0,
        description="shorten (or undo) an optimizer step whose KL(before || after) on its own "
        "batch is above this (trainer.trust_region); None: every step stands",
    )
    seed: int = 0
    lora: LoraSettings | None = Field(
        None,
        description="train LoRA adapters (trainer.lora) instead of every weight; None: full "
        "fine-tuning",
    )
    # --- weights, checkpoints, data
    canary: CanaryConfig | None = Field(
        default_factory=CanaryConfig,
        description="probes sent with every push, scored by the server (trainer.canary); "
        "None: no check",
    )
    push_every: int = Field(1, ge=1, description="push weights every k optimizer steps")
    broadcast: BroadcastConfig | None = Field(
        None,
        description="broadcast each push to the servers (trainer.broadcast); None: upload "
        "it over HTTP",
    )
    background_push: bool = Field(
        False,
        description="send each push while the next step trains (trainer.background_push); "
        "needs max_staleness >= 1",
    )
    checkpoint_every: int = Field(
        1,
        ge=1,
        description="checkpoint, then ack, every k steps; the server counts unacked groups "
        "against its admission budget, so k > 1 throttles sampling",
    )
    keep_checkpoints: int = Field(
        2, ge=2, description="checkpoints kept on disk (>= 2: one survives a crash mid-save)"
    )
    alarms: AlarmBounds = Field(default_factory=AlarmBounds)
    online_eval: OnlineEvalConfig | None = Field(
        None, description="evaluate on the server during training and keep the best weights"
    )
    guard: GuardConfig | None = Field(
        None, description="go back to the best weights when online success falls (off: None)"
    )
    log_samples: bool = Field(
        False,
        description="append every step's samples (reward, advantage, sampled ids, behaviour and "
        "trainer logprobs) to <output_dir>/samples.jsonl, for diagnosing a run",
    )
    report_to: list[Tracker] = Field(
        default_factory=list,
        description="experiment trackers for TRL's metrics and rollgym's (trainer.series), "
        "through TRL's report_to; tensorboard writes under <output_dir>/runs",
    )
    pull_timeout_s: float = Field(10.0, gt=0, le=600, description="one long-poll's wait")
    stall_timeout_s: float = Field(600.0, gt=0, description="give up after this long starved")

    @field_validator("group_size")
    @classmethod
    def _a_group_to_compare(cls, size: int) -> int:
        if size < 2:
            raise ValueError("GRPO compares the samples of a group: group_size must be at least 2")
        return size

    @field_validator("report_to")
    @classmethod
    def _trackers_installed(cls, trackers: list[str]) -> list[str]:
        for tracker in trackers:
            if importlib.util.find_spec(tracker) is None:
                raise ValueError(
                    f"{tracker} is not installed: pip install 'rollgym[trackers]' "
                    "(requirements/cpu.txt pins it)"
                )
        return trackers

    @model_validator(mode="after")
    def _consistent(self) -> TrainerConfig:
        if self.max_staleness == 0 and self.push_every != 1:
            raise ValueError(
                "max_staleness=0 (synchronous) needs push_every=1: every step must push the weights "
                "the next batch is sampled from; raise max_staleness or set push_every=1"
            )
        if self.background_push and self.max_staleness == 0:
            raise ValueError(
                "background_push needs max_staleness >= 1: synchronous mode samples only from "
                "the weights just pushed, so every step must wait for its push"
            )
        if self.checkpoint_every % self.push_every:
            raise ValueError(
                f"checkpoint_every ({self.checkpoint_every}) must be a multiple of push_every "
                f"({self.push_every}): a checkpoint stores weights the server has a version for"
            )
        if self.broadcast is not None and self.lora is not None and self.lora.serve == "adapter":
            raise ValueError(
                "broadcast sends whole weights: a server that serves adapters takes uploads "
                "only (set trainer.lora.serve='merged' or drop trainer.broadcast)"
            )
        if self.epsilon_high < self.epsilon:
            raise ValueError("epsilon_high must be >= epsilon (the clip range's high side)")
        if self.guard is not None and self.online_eval is None:
            raise ValueError("guard needs online_eval: it acts on the online evaluations")
        if self.online_eval is not None and self.online_eval.every % self.push_every:
            raise ValueError(
                f"online_eval.every ({self.online_eval.every}) must be a multiple of push_every "
                f"({self.push_every}): an evaluation measures weights the server serves"
            )
        return self


def parse_config(cls: type[C], **values: object) -> C:
    """Build ``cls`` from ``values``; a bad value raises ``TrainerConfigError`` naming the field."""
    try:
        return cls.model_validate(values)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or cls.__name__}: {err['msg']}"
            for err in exc.errors()
        )
        raise TrainerConfigError(f"invalid {cls.__name__}: {problems}") from None
