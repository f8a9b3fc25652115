"""The served-weights canary: is the policy the server serves the one the trainer pushed?

A weight update can land without changing what is served (an adapter never loaded, a
reload that kept old tensors, a stale cache): generation goes on, every sample is off
policy, and nothing fails. So a push carries a few fixed probe sequences with the
trainer's own logprobs for them under the pushed weights (the ``CANARY_HEADER``, JSON
``CanaryProbes``); once the update is applied the server scores the same tokens under the
weights it now serves and answers ``CanaryResult`` inside ``WeightUpdateResult.canary``:

    mismatch = max over probe tokens |logp_served(t) - logp_trainer(t)|

above ``tolerance`` is an alarm (the server's log, the gauge
``rollgym_served_weights_mismatch``, the trainer's step alarms and dashboard; with
``trainer.canary.stop_on_mismatch`` the run stops).

    >>> probe = Probe(token_ids=[5, 6, 7], logprobs=[-1.0, -2.0])
    >>> logprob_mismatch([probe.logprobs], [[-1.001, -2.5]])
    0.5
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field, model_validator

CANARY_HEADER = "X-Rollgym-Canary"
NON_FINITE_GAP = 1e9  # a nan or infinite logprob on either side: no match, and JSON stays finite
MAX_PROBES = 8
MAX_PROBE_TOKENS = 256


class Probe(BaseModel):
    """One sequence and the trainer's logprob of each token after the first, given the
    tokens before it."""

    model_config = ConfigDict(extra="forbid")

    token_ids: list[int] = Field(min_length=2, max_length=MAX_PROBE_TOKENS)
    logprobs: list[float]

    @model_validator(mode="after")
    def _one_per_scored_token(self) -> Probe:
        if len(self.logprobs) != len(self.token_ids) - 1:
            raise ValueError(
                f"a probe of {len(self.token_ids)} tokens needs {len(self.token_ids) - 1} "
                f"logprobs (one per token after the first), not {len(self.logprobs)}"
            )
        if any(not math.isfinite(x) or x > 0 for x in self.logprobs):
            raise ValueError("probe logprobs must be finite and at most 0")
        return self


class CanaryProbes(BaseModel):
    """What a push sends beside the weights (the ``CANARY_HEADER``, as JSON)."""

    model_config = ConfigDict(extra="forbid")

    probes: list[Probe] = Field(min_length=1, max_length=MAX_PROBES)
    tolerance: float = Field(gt=0, description="the largest |logprob difference| that passes")


class CanaryResult(BaseModel):
    """The server's verdict on the weights it serves after an update."""

    policy_version: int = Field(description="the version the probes were scored under")
    mismatch: float = Field(description="max |logp_served - logp_trainer| over probe tokens")
    tolerance: float
    passed: bool


def logprob_mismatch(
    expected: Sequence[Sequence[float]], served: Sequence[Sequence[float]]
) -> float:
    """The largest absolute difference between two sets of per-token logprobs; a non-finite
    one counts ``NON_FINITE_GAP``.

    >>> logprob_mismatch([[-1.0]], [[float("nan")]])
    1000000000.0
    """
    worst = 0.0
    for want, got in zip(expected, served, strict=True):
        for a, b in zip(want, got, strict=True):
            gap = abs(a - b)
            worst = max(worst, gap if math.isfinite(gap) else NON_FINITE_GAP)
    return worst
