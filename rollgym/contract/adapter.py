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
ADAPTER_FILE = "adapter_model.safetensors"  # a peft adapter folder's files, as vLLM reads them
ADAPTER_CONFIG = "adapter_config.json"
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the largest ranks vLLM can be set to


def served_lora_rank(rank: int) -> int:
    """The smallest rank size vLLM can be set to (``engine.lora.max_rank``) that serves
    adapters of ``rank``.

    >>> served_lora_rank(4), served_lora_rank(16), served_lora_rank(17)
    (8, 16, 32)
    """
    for size in LORA_RANKS:
        if size >= rank:
            return size
    raise ValueError(f"vLLM serves adapters up to rank {LORA_RANKS[-1]}, not {rank}")


class AdapterShape(BaseModel):
    """An adapter's rank ``r``, its scale's numerator ``alpha`` (the update is
    ``alpha / r * B A``) and the names of the linear layers it may adapt."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rank: int = Field(ge=1, le=1024)
    alpha: float = Field(gt=0)
    target_modules: tuple[str, ...] = Field(min_length=1)
