"""The LM head's vocabulary chunk on a CPU: smaller than TRL's, faster and lighter.

TRL scores a batch's tokens with a fused LM head (``trl.kernels.ChunkedLogProbFunction``):
the logits are made tile by tile, (tokens x a chunk of the vocabulary), never whole. Its
chunk, 32,768 columns, suits its Triton kernel on a GPU. Without Triton the same function
folds each tile with torch ops, and its backward holds about eight temporaries of the
tile's size at once: on SmolLM2 (49,152 tokens of vocabulary) with a batch of 816 scored
tokens, 102 MiB a tile and about 0.8 GiB in all, the largest block of a LoRA run's peak
memory (issue 38's profile). With 2,048 columns the same forward and backward ran 1.36-1.75x
as fast with 836-858 MiB less at 816 tokens, and 1.14-1.17x as fast with 4.3 GiB less at
4,096 (``python -m bench.lm_head_chunk``, 3 runs; the log-probabilities differ by at most
2e-6: the chunks only reorder an online logsumexp).

TRL keeps the chunk in a module constant, not a setting; ``use_cpu_chunk`` sets it for a
trainer on a CPU, and a unit test fails if TRL renames it.
"""

from __future__ import annotations

import torch
import trl.trainer.utils as trl_utils

CPU_VOCAB_CHUNK = 2048
TRL_CHUNK_SETTING = "_CHUNKED_LOGPROB_CHUNK_SIZE"


def use_cpu_chunk(device: torch.device) -> None:
    """On a CPU, score the vocabulary ``CPU_VOCAB_CHUNK`` columns at a time (process-wide:
    every TRL trainer here); on a GPU, leave TRL's chunk."""
    if device.type != "cpu":
        return
    if not hasattr(trl_utils, TRL_CHUNK_SETTING):
        raise RuntimeError(f"TRL no longer has {TRL_CHUNK_SETTING}: see trainer.lm_head_chunk")
    setattr(trl_utils, TRL_CHUNK_SETTING, CPU_VOCAB_CHUNK)
