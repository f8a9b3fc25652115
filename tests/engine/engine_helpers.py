"""What the engine-tier tests share: transformers as the reference, streamed uploads.

This module holds no tests; the test modules import it.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from pathlib import Path

import torch

from rollgym.engine.metrics import NullMetrics
from rollgym.engine.weights.store import PolicyStore
from rollgym.engine.weights.updater import WeightUpdater


def assert_close(got: list[float], want: list[float], tol: float = 2e-3) -> None:
    """Logprobs that agree within ``tol`` each (float32 on both sides agree to 2e-3)."""
    assert all(math.isclose(g, w, abs_tol=tol) for g, w in zip(got, want, strict=True)), (
        got,
        want,
    )


def hf_logprobs(model, prompt: list[int], sampled: list[int]) -> list[float]:
    """transformers' logprob of each sampled token, given the prompt and the tokens before it."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + sampled])).logits[0].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    positions = range(len(prompt) - 1, len(prompt) + len(sampled) - 1)
    return [logprobs[p, t].item() for p, t in zip(positions, sampled, strict=True)]


async def chunks(data: bytes, size: int = 1 << 16) -> AsyncIterator[bytes]:
    """``data`` as an upload arrives: in pieces."""
    for start in range(0, len(data), size):
        yield data[start : start + size]


def weight_updater(engine, staging: Path) -> WeightUpdater:
    """An updater whose applied weights are kept beside ``staging`` (``policy/``)."""
    return WeightUpdater(
        engine,
        staging,
        PolicyStore(staging.parent / "policy"),
        max_bytes=1 << 31,
        metrics=NullMetrics(),
        aliases=engine.tied_aliases(),
    )
