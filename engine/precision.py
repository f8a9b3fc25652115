"""The serving side of the precision red line: no lower precision without a verdict.

``admitted_verdict(engine)`` is called when the server's settings are validated: an engine that
serves below its ``training_dtype`` (bfloat16 or float16 under float32, FP8 under either)
needs ``<model_dir>/rollgym-precision.json`` from ``rollgym eval --precision ...``, admitted,
for that precision and exactly these weights; otherwise the server refuses to start and
says which command to run. See ``rollgym.contract.precision``.
"""

from __future__ import annotations

import json

from rollgym.contract.precision import VERDICT_FILE, PrecisionVerdict, is_lower, weights_fingerprint
from rollgym.engine.config import EngineConfig


def serving_precision(engine: EngineConfig) -> str:
    """What the engine computes in: FP8 if quantized, else its dtype ("auto": the model's)."""
    if engine.quantization is not None:
        return engine.quantization
    if engine.dtype != "auto":
        return engine.dtype
    config = json.loads((engine.model_dir / "config.json").read_text())
    return str(config.get("dtype") or config.get("torch_dtype") or "float32")


def admitted_verdict(engine: EngineConfig) -> PrecisionVerdict | None:
    """The verdict that admits the engine's lower precision; None when it serves at the
    training precision. Raises ``ValueError`` (with the fix) when no verdict admits it."""
    serving = serving_precision(engine)
    if not is_lower(serving, engine.training_dtype):
        return None
    command = (
        f"rollgym eval --model {engine.model_dir} --precision {serving} "
        f"--training-precision {engine.training_dtype}"
    )
    path = engine.model_dir / VERDICT_FILE
    if not path.is_file():
        raise ValueError(
            f"serving {serving} below the training precision {engine.training_dtype} needs "
            f"the red line's verdict ({path} is missing): run `{command}`"
        )
    verdict = PrecisionVerdict.model_validate_json(path.read_text())
    if (
        verdict.candidate.precision != serving
        or verdict.training.precision != engine.training_dtype
    ):
        raise ValueError(
            f"{path} compares {verdict.candidate.precision} with {verdict.training.precision}, "
            f"not {serving} with {engine.training_dtype}: run `{command}`"
        )
    if verdict.weights != weights_fingerprint(engine.model_dir):
        raise ValueError(f"{path} is for other weights than {engine.model_dir}'s: run `{command}`")
    if not verdict.admitted:
        raise ValueError(
            f"{serving} is refused for these weights: success dropped "
            f"{verdict.drop_points:.1f} points (95% CI {verdict.drop_low:.1f} to "
            f"{verdict.drop_high:.1f}), more than the red line of {verdict.red_line_points} "
            f"points; serve {engine.training_dtype}"
        )
    return verdict
