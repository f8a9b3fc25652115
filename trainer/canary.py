"""The served-weights canary's trainer side (``rollgym.contract.canary``).

Every push carries ``CanaryProbes``: a few fixed sequences of token ids (drawn once from
the vocabulary with ``CanaryConfig.seed``, the same at every push) and the pushed model's
own logprob of each token after the first. The server scores them once the update serves
and answers whether they match; ``trainer.callbacks.StepCallback`` prints an alarm line
for a mismatch, puts the mismatch in the step's alarms (log, dashboard) and, with
``stop_on_mismatch``, stops the run.
"""

from __future__ import annotations

from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from rollgym.contract.canary import MAX_PROBE_TOKENS, MAX_PROBES, CanaryProbes, Probe


class CanaryConfig(BaseModel):
    """The probes every push sends, and what a mismatch does."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    probes: int = Field(2, ge=1, le=MAX_PROBES, description="probe sequences per push")
    probe_tokens: int = Field(32, ge=2, le=MAX_PROBE_TOKENS, description="tokens per probe")
    tolerance: float = Field(
        0.02,
        gt=0,
        description="the largest |logprob served - trainer's| that passes (float32 on both "
        "sides agreed to 2e-3 on the default model; raise it for a bfloat16 engine)",
    )
    stop_on_mismatch: bool = Field(False, description="stop the run at a mismatch")
    seed: int = Field(0, description="draws the probes' token ids")


def probe_ids(config: CanaryConfig, vocab_size: int) -> list[list[int]]:
    """The fixed probe sequences: ``config.probes`` rows of ``probe_tokens`` random ids.

    >>> probe_ids(CanaryConfig(probes=2, probe_tokens=3), 100) == probe_ids(
    ...     CanaryConfig(probes=2, probe_tokens=3), 100)
    True
    """
    generator = torch.Generator().manual_seed(config.seed)
    shape = (config.probes, config.probe_tokens)
    return torch.randint(vocab_size, shape, generator=generator).tolist()


def canary_probes(model: Any, config: CanaryConfig) -> CanaryProbes:
    """The probes with ``model``'s logprobs."""
    rows = probe_ids(config, model.config.vocab_size)
    probes = [
        Probe(token_ids=row, logprobs=values)
        for row, values in zip(rows, sequence_logprobs(model, rows), strict=True)
    ]
    return CanaryProbes(probes=probes, tolerance=config.tolerance)


def sequence_logprobs(model: Any, rows: list[list[int]]) -> list[list[float]]:
    """``model``'s logprob of each token after the first of each row (rows of one length;
    temperature 1, eval mode: no dropout)."""
    ids = torch.tensor(rows, device=next(model.parameters()).device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = model(input_ids=ids).logits.float()
    finally:
        model.train(was_training)
    logps = torch.log_softmax(logits[:, :-1], dim=-1)
    return logps.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1).cpu().tolist()
