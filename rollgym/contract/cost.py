"""The cost board's schema: what sampling costs, per token and per trained sample.

Part of ``DashboardData`` (``GET /dashboard/data``, field ``cost``) and of ``/metrics``.
Definitions (computed by ``rollgym.server.observability.cost``):

* **tokens/s**: generated and prompt tokens per wall second over the recent window;
* **device-seconds per 1k generated tokens**: CPU-seconds of the server and its engine
  process (GPU-seconds, i.e. wall seconds x GPUs, on a GPU host) per 1,000 tokens sampled;
* **machine-seconds**: device-seconds / the machine's devices (cores, or GPUs): the share
  of one machine-hour that the price applies to;
* **long-tail share**: of each group's wall time (first start to last end), the part
  after all but its slowest ``max(1, 10%)`` episodes had ended, summed over groups: the
  time the sampler waits on stragglers;
* **sampling-to-training ratio**: busy seconds of the sampling stage / of the training
  stage (the dashboard's stages);
* **cost per trained sample**: the machine's wall time since start / trajectories the
  trainer reported trained, times the price;
* **savings**: machine-seconds each measured saving spared on this run (negative: it
  cost), and what that is worth at the price.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class SpeculationView(BaseModel):
    """The speculative-decoding gate (``rollgym.engine.vllm.speculation``)."""

    enabled: bool = False
    state: Literal["on", "off"] | None = None
    drafting: bool = False
    acceptance: float | None = Field(None, description="accepted / drafted, last window on")
    shadow_acceptance: float | None = Field(
        None, description="the drafts' would-be acceptance, replayed over the last plain window"
    )
    would_be_speedup: float | None = Field(
        None, description="... and its drafting rate over the plain one, predicted"
    )
    draft_step_cost: float | None = Field(
        None, description="a drafting step's time over a plain one's, per request (learned)"
    )
    acceptance_total: float | None = Field(None, description="accepted / drafted, since start")
    plain_tokens_per_s: float | None = Field(
        None, description="tokens per sequence-second (per running request), drafts off"
    )
    drafting_tokens_per_s: float | None = Field(None, description="... drafts on")
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    switches: int = 0
    next_probe_in_s: float | None = Field(None, description="until drafting may be tried again")


class Saving(BaseModel):
    name: Literal["prefix_cache", "speculative_decoding", "precision"]
    machine_s: float | None = Field(description="machine-seconds saved on this run; None: none")
    worth: float | None = Field(None, description="machine_s at the price per hour")
    note: str = Field(description="how it was measured")


class CostBoard(BaseModel):
    device: Literal["cpu", "gpu"]
    devices: int = Field(description="cores (CPU) or GPUs of the machine")
    window_s: float = Field(description="the window of the rates")
    generated_tokens_per_s: float = 0.0
    prompt_tokens_per_s: float = 0.0
    device_s_per_1k_tokens: float | None = None
    machine_s_per_1k_tokens: float | None = None
    long_tail_share: float | None = None
    sampling_training_ratio: float | None = None
    prefix_cache_hit_rate: float | None = None
    trained_samples: int = 0
    machine_s_per_trained_sample: float | None = None
    price_per_hour: float | None = Field(None, description="per machine-hour; None: unset")
    cost_per_1k_tokens: float | None = None
    cost_per_trained_sample: float | None = None
    savings: list[Saving] = Field(default_factory=list)
    speculation: SpeculationView = Field(default_factory=SpeculationView)
    serving_dtype: str = "float32"
    precision_kl: float | None = Field(
        None,
        description="KL(behaviour || training precision) per token that the precision gate "
        "measured for the lower precision served (None: serving the training precision)",
    )
