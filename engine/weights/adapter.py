"""LoRA adapters as weight updates: what one must be before an engine serves it.

An adapter travels as one safetensors file in peft's layout (``rollgym.contract.adapter``).
Its shape (rank, scale, target modules) comes either in the file's metadata (an upload: one
self-describing file, ``shape_declared``) or in peft's ``adapter_config.json`` beside it (a
checkpoint directory, by path: ``shape_in_peft_config``).

``check_adapter`` reads the header only and refuses, naming it, anything an engine would
load wrongly or not at all: a tensor that is not a LoRA matrix of a layer the base model
has, a layer outside the target modules, a shape that does not fit, half a pair, a rank
above the server's. ``write_adapter_config`` then writes the config vLLM reads, built from
the checked fields only (never a client's file passed through).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import ValidationError

from rollgym.contract.adapter import ADAPTER_CONFIG, ADAPTER_METADATA, AdapterShape
from rollgym.engine.base import AdapterWeights, Manifest
from rollgym.engine.errors import BadWeights
from rollgym.engine.weights.safetensors_check import read_header

_TENSOR = re.compile(r"base_model\.model\.(?P<module>.+)\.lora_(?P<half>[AB])\.weight")
_FLOATING = {"F32", "F16", "BF16"}
# peft options vLLM would read differently from plain LoRA (or not at all): refused
_PLAIN: dict[str, object] = {
    "use_dora": False, "modules_to_save": None, "bias": "none", "use_rslora": False,
    "lora_bias": False, "layer_replication": None, "rank_pattern": {}, "alpha_pattern": {},
}  # fmt: skip


def shape_declared(metadata: dict[str, str]) -> AdapterShape | None:
    """The shape an upload's metadata declares; None for whole weights (no such key)."""
    raw = metadata.get(ADAPTER_METADATA)
    if raw is None:
        return None
    try:
        return AdapterShape.model_validate_json(raw)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise BadWeights(
            f"{ADAPTER_METADATA} metadata is not an adapter's shape: {error['loc']}: {error['msg']}"
        ) from None


def shape_in_peft_config(path: Path) -> AdapterShape:
    """The shape in peft's ``adapter_config.json`` (a checkpoint directory's)."""
    try:
        config = json.loads(path.read_text())
        plain = {key: config.get(key, value) for key, value in _PLAIN.items()}
        if plain != _PLAIN:
            raise BadWeights(f"{path.name}: only plain LoRA is served, not {plain}")
        return AdapterShape(
            rank=config["r"], alpha=config["lora_alpha"], target_modules=config["target_modules"]
        )
    except BadWeights:
        raise
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BadWeights(f"{path.name} is not a LoRA adapter's config: {exc!r}") from None


def check_adapter(
    path: Path, shape: AdapterShape, manifest: Manifest, *, max_rank: int
) -> AdapterWeights:
    """``path``'s tensors against the base model's ``manifest`` (see the module docstring);
    the adapter, to be served from ``path``'s folder, or ``BadWeights``."""
    if shape.rank > max_rank:
        raise BadWeights(
            f"the adapter's rank {shape.rank} is above the server's engine.lora.max_rank {max_rank}"
        )
    tensors, _ = read_header(path)
    halves: dict[str, set[str]] = {}
    for name, spec in tensors.items():
        match = _TENSOR.fullmatch(name)
        if match is None:
            raise BadWeights(f"{name!r} is not a LoRA matrix (base_model.model.<layer>.lora_A/B)")
        module, half = match["module"], match["half"]
        base = manifest.get(f"{module}.weight")
        if base is None or len(base.shape) != 2:
            raise BadWeights(f"{name!r} adapts {module!r}, which is no linear layer of the model")
        if module.rsplit(".", 1)[-1] not in shape.target_modules:
            raise BadWeights(f"{name!r} adapts a layer outside {list(shape.target_modules)}")
        out, inner = base.shape
        expected = (shape.rank, inner) if half == "A" else (out, shape.rank)
        if spec.shape != expected or spec.dtype not in _FLOATING:
            raise BadWeights(f"{name!r} is {spec.dtype}{list(spec.shape)}, not a float {expected}")
        halves.setdefault(module, set()).add(half)
    if not halves:
        raise BadWeights("the adapter holds no LoRA matrices")
    unpaired = sorted(module for module, seen in halves.items() if seen != {"A", "B"})
    if unpaired:
        raise BadWeights(f"lora_A and lora_B come in pairs; alone: {unpaired[:5]}")
    return AdapterWeights(directory=path.parent, rank=shape.rank, nbytes=path.stat().st_size)


def write_adapter_config(folder: Path, shape: AdapterShape) -> Path:
    """Write the ``adapter_config.json`` vLLM reads for ``shape`` into ``folder``."""
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": shape.rank,
        "lora_alpha": shape.alpha,
        "target_modules": list(shape.target_modules),
        "lora_dropout": 0.0,
        "fan_in_fan_out": False,
        **_PLAIN,
    }
    path = folder / ADAPTER_CONFIG
    path.write_text(json.dumps(config, indent=1))
    return path
