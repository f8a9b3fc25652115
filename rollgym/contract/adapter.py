"""A LoRA adapter as a weight update: the shape its upload declares.

A trainer that trains adapters may push the adapter alone to a server that serves adapters
(``engine.lora``): one safetensors file holding peft's matrices
(``base_model.model.<layer>.lora_A.weight``, ``r x in``; ``...lora_B.weight``, ``out x r``),
whose ``__metadata__`` holds ``AdapterShape`` as JSON under ``ADAPTER_METADATA``. A file
without that key is whole weights.

    >>> AdapterShape(rank=8, alpha=16, target_modules=("q_proj",)).model_dump_json()
    '{"rank":8,"alpha":16.0,"target_modules":["q_proj"]}'
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

ADAPTER_METADATA = "rollgym.lora"


class AdapterShape(BaseModel):
    """An adapter's rank ``r``, its scale's numerator ``alpha`` (the update is
    ``alpha / r * B A``) and the names of the linear layers it may adapt."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rank: int = Field(ge=1, le=1024)
    alpha: float = Field(gt=0)
    target_modules: tuple[str, ...] = Field(min_length=1)
