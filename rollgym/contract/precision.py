"""Serving in a lower precision than training, behind a measured red line.

Sampling in bfloat16 (or FP8 on a GPU) is faster than in the trainer's float32, but the
policy it samples is not quite the one being trained. ``rollgym eval --precision P``
plays the same held-out task seeds at the training precision and at ``P``, and writes a
``PrecisionVerdict`` beside the model (``VERDICT_FILE``): admitted only when success drops
by at most ``red_line_points`` percentage points. The server refuses to serve a lower
precision than ``training_dtype`` without an admitted verdict for exactly those weights
(``weights_fingerprint``). What remains of the mismatch per token is the trainer's
importance-sampling correction's job; ``kl_to_training`` says how large it is.

    >>> is_lower("bfloat16", "float32"), is_lower("float32", "float32"), is_lower("fp8", "bfloat16")
    (True, False, True)
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

Precision = Literal["float32", "bfloat16", "float16", "fp8"]
VERDICT_FILE = "rollgym-precision.json"
_BITS = {"float32": 32, "bfloat16": 16, "float16": 16, "fp8": 8}


def is_lower(serving: str, training: str) -> bool:
    """Whether ``serving`` has fewer bits than ``training`` (unknown names: no)."""
    return _BITS.get(serving, 32) < _BITS.get(training, 32)


class PrecisionRun(BaseModel):
    """One precision's evaluation on the held-out seeds."""

    precision: str
    episodes: int
    successes: int
    low: float = Field(description="95% Wilson interval of the success rate")
    high: float
    mean_reward: float
    tokens_per_s: float = Field(description="generated tokens per busy second of the engine")
    kl_to_training: float | None = Field(
        None,
        description="KL(behaviour || training precision) per model token, estimated on this "
        "run's samples (k3: mean of exp(r) - 1 - r, r = logp_training - logp_behaviour)",
    )

    @property
    def rate(self) -> float:
        return self.successes / self.episodes if self.episodes else 0.0


class PrecisionVerdict(BaseModel):
    """The red line's answer for one model's weights and one lower precision."""

    weights: str = Field(description="weights_fingerprint of the model evaluated")
    env_id: str
    seeds: list[int]
    training: PrecisionRun
    candidate: PrecisionRun
    red_line_points: float
    drop_points: float = Field(description="training - candidate success, percentage points")
    drop_low: float = Field(description="95% interval of the drop (Newcombe), in points")
    drop_high: float
    admitted: bool
    at: float

    @property
    def speedup(self) -> float | None:
        """Candidate tokens/s over training tokens/s, as measured."""
        base = self.training.tokens_per_s
        return self.candidate.tokens_per_s / base if base > 0 else None


def difference_interval(
    rate_a: float, interval_a: tuple[float, float], rate_b: float, interval_b: tuple[float, float]
) -> tuple[float, float]:
    """Newcombe's hybrid score interval of ``rate_a - rate_b`` from each rate's Wilson interval.

    >>> low, high = difference_interval(0.8, (0.74, 0.85), 0.8, (0.74, 0.85))
    >>> round(low, 3), round(high, 3)
    (-0.078, 0.078)
    """
    (low_a, high_a), (low_b, high_b) = interval_a, interval_b
    d = rate_a - rate_b
    return (
        d - math.sqrt((rate_a - low_a) ** 2 + (high_b - rate_b) ** 2),
        d + math.sqrt((high_a - rate_a) ** 2 + (rate_b - low_b) ** 2),
    )


_FINGERPRINTS: dict[tuple[str, int, int], str] = {}


def weights_fingerprint(model_dir: Path) -> str:
    """A digest of the model's safetensors files (cached per file size and mtime)."""
    digest = hashlib.blake2b(digest_size=16)
    for path in sorted(model_dir.glob("*.safetensors")):
        stat = path.stat()
        key = (str(path), stat.st_size, stat.st_mtime_ns)
        if key not in _FINGERPRINTS:
            file_digest = hashlib.blake2b(digest_size=16)
            with path.open("rb") as handle:
                while chunk := handle.read(1 << 22):
                    file_digest.update(chunk)
            _FINGERPRINTS[key] = file_digest.hexdigest()
        digest.update(path.name.encode() + b"=" + _FINGERPRINTS[key].encode())
    return digest.hexdigest()
