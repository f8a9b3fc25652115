"""LoRA: train low-rank adapters (``peft``) instead of the whole model.

``LoraSettings`` is the run's choice (``TrainerConfig.lora``; None trains every weight). TRL
wraps the model in a ``peft.PeftModel`` from ``LoraSettings.peft_config()``; the optimizer
then holds only the adapters' matrices ``A`` (``r x in``) and ``B`` (``out x r``), and each
adapted linear layer computes ``W x + (alpha / r) * B A x``.

What a push sends depends on ``LoraSettings.serve``. ``merged`` (the default): the merged
model (``merged_weights``), each adapted layer's ``W + (alpha / r) * B A`` under the base
checkpoint's names, computed beside the training model without touching it, one layer at
a time as the push sends it; the server
serves it as whole weights. ``adapter``: the adapter alone (``adapter_tensors``, peft's
names, its shape in the file's metadata), for a server that serves adapters on the same
base model (``engine.lora``). A checkpoint
(TRL's ``save_model`` of a ``PeftModel``) holds the adapter only (``adapter_model.safetensors``
and ``adapter_config.json``); ``export_merged`` folds one into its base model and writes an
ordinary model directory (``rollgym export-model``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import torch
from peft import AutoPeftModelForCausalLM, LoraConfig, PeftConfig, PeftModel
from peft.tuners.lora import LoraLayer
from pydantic import BaseModel, ConfigDict, Field, model_validator
from transformers import AutoModelForCausalLM, AutoTokenizer

from rollgym.contract.adapter import (
    ADAPTER_CONFIG,
    ADAPTER_METADATA,
    AdapterShape,
    served_lora_rank,
)

ATTENTION_AND_MLP = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class LoraSettings(BaseModel):
    """The adapters: which linear layers get one, their rank and their scale.

    >>> LoraSettings(rank=8).peft_config().lora_alpha
    16
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    rank: int = Field(16, ge=1, le=1024, description="r: the adapters' inner dimension")
    alpha: int | None = Field(
        None, gt=0, description="the update's scale is alpha / rank; None: 2 x rank"
    )
    target_modules: list[str] = Field(
        default_factory=lambda: list(ATTENTION_AND_MLP),
        min_length=1,
        description="names of the linear layers that get an adapter (default: attention and MLP)",
    )
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the adapters' input")
    serve: Literal["merged", "adapter"] = Field(
        "merged",
        description="what a push sends: the merged weights (any server), or the adapter "
        "alone (a server with engine.lora; rollgym run starts its own so)",
    )

    @model_validator(mode="after")
    def _servable(self) -> LoraSettings:
        if self.serve == "adapter":
            served_lora_rank(self.rank)  # vLLM's largest rank, or a ValueError that says it
        return self

    def peft_config(self) -> LoraConfig:
        """The ``peft.LoraConfig`` TRL builds the ``PeftModel`` from."""
        return LoraConfig(
            r=self.rank,
            lora_alpha=self.alpha if self.alpha is not None else 2 * self.rank,
            target_modules=list(self.target_modules),
            lora_dropout=self.dropout,
            bias="none",
            task_type="CAUSAL_LM",
        )


class MergedWeight:
    """One adapted layer's served weight, ``W + (alpha / r) * B A``, made when read
    (``tensor()``): a push of merged weights then holds one merged matrix at a time, not a
    second copy of every adapted layer (0.33 GiB of a SmolLM2 LoRA trainer's peak)."""

    def __init__(self, weight: torch.Tensor, layer: Any) -> None:
        """``weight``: the base layer's ``W``; ``layer``: its peft ``LoraLayer``."""
        self.weight, self.layer = weight, layer

    @property
    def shape(self) -> torch.Size:
        return self.weight.shape

    @property
    def dtype(self) -> torch.dtype:
        return self.weight.dtype

    def tensor(self) -> torch.Tensor:
        """``W`` with each of the layer's active adapters folded in (a new tensor)."""
        weight = self.weight
        with torch.no_grad():
            for adapter in self.layer.active_adapters:
                if adapter in self.layer.lora_A:
                    weight = weight + self.layer.get_delta_weight(adapter).to(weight.dtype)
        return weight


Weight = torch.Tensor | MergedWeight  # a served weight: a tensor, or one made when read


def as_tensor(weight: Weight) -> torch.Tensor:
    """``weight`` as a tensor (a ``MergedWeight`` is made now)."""
    return weight.tensor() if isinstance(weight, MergedWeight) else weight


def merged_weights(model: PeftModel) -> dict[str, Weight]:
    """``model``'s served weights under the base checkpoint's names (what
    ``named_parameters()`` of the un-wrapped model would list): the frozen ones as they are,
    each adapted layer's as a ``MergedWeight``; ``model`` is not changed."""
    base: Any = model.get_base_model()
    weights: dict[str, Weight] = {}
    for name, param in base.named_parameters():
        if ".lora_" not in name:
            weights[name.replace(".base_layer.", ".")] = param.detach()
    for name, module in base.named_modules():
        if isinstance(module, LoraLayer):  # each kind (Linear, Embedding...) has get_delta_weight
            key = f"{name}.weight"
            weights[key] = MergedWeight(as_tensor(weights[key]), module)
    return weights


def merged_tensors(model: PeftModel) -> dict[str, torch.Tensor]:
    """``merged_weights`` made whole: every adapted layer's merged tensor at once."""
    return {name: as_tensor(weight) for name, weight in merged_weights(model).items()}


def adapter_tensors(model: PeftModel) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """``model``'s active adapter as a push sends it: its LoRA matrices under peft's saved
    names (``base_model.model.<layer>.lora_A.weight``...) and the metadata that declares
    its shape (``engine.weights.adapter``)."""
    from peft import get_peft_model_state_dict

    config: Any = model.peft_config[model.active_adapter]
    tensors = get_peft_model_state_dict(model)
    shape = AdapterShape(
        rank=config.r, alpha=config.lora_alpha, target_modules=tuple(sorted(config.target_modules))
    )
    return tensors, {ADAPTER_METADATA: shape.model_dump_json()}


def zero_adapter(model: torch.nn.Module) -> PeftModel:
    """``model`` under a rank-1 adapter on ``q_proj`` whose ``B`` is zero (peft's start): it
    computes exactly what ``model`` does, as an adapter a server that serves adapters only
    (``engine.lora``) takes, e.g. to evaluate a warm start there."""
    from peft import get_peft_model

    settings = LoraSettings(rank=1, target_modules=["q_proj"])
    return get_peft_model(model, settings.peft_config())


def served_weights(model: torch.nn.Module) -> dict[str, Weight]:
    """The weights the server serves for ``model``: its parameters (a tied tensor once), a
    LoRA model's merged, each made when read (``merged_weights``)."""
    if isinstance(model, PeftModel):
        return merged_weights(model)
    return dict(model.named_parameters())


def is_adapter_dir(path: Path) -> bool:
    """Whether ``path`` holds a peft adapter (a LoRA checkpoint) rather than a whole model."""
    return (path / ADAPTER_CONFIG).is_file()


def load_policy(model_dir: Path) -> torch.nn.Module:
    """The policy saved in ``model_dir``: an ordinary model, or its base with the adapter
    on top (a ``PeftModel``, whose push sends the merged weights) when it holds one."""
    if is_adapter_dir(model_dir):
        return AutoPeftModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)


def export_merged(adapter_dir: Path, output_dir: Path, *, base_model: Path | None = None) -> Path:
    """Fold the adapter in ``adapter_dir`` into its base model; write the merged model and
    the base's tokenizer to ``output_dir`` (an ordinary model directory any loader reads).

    ``base_model`` overrides the base the adapter names (its ``base_model_name_or_path``),
    e.g. when the run's model directory has moved since training.
    """
    if not is_adapter_dir(adapter_dir):
        raise FileNotFoundError(
            f"{adapter_dir} holds no LoRA adapter ({ADAPTER_CONFIG} missing): "
            "pass a checkpoint of a run trained with trainer.lora"
        )
    base_path = base_model or Path(
        PeftConfig.from_pretrained(str(adapter_dir)).base_model_name_or_path
    )
    if not base_path.is_dir():
        raise FileNotFoundError(
            f"the adapter's base model {base_path} is not a directory: pass the base model's "
            "directory (--base-model)"
        )
    base = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32)
    merged = PeftModel.from_pretrained(base, adapter_dir).merge_and_unload()
    merged.save_pretrained(output_dir)
    AutoTokenizer.from_pretrained(base_path).save_pretrained(output_dir)
    return output_dir
