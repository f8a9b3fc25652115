"""One forward pass per distinct prompt, not per sample: the GRPO loss's logprobs.

A GRPO batch is groups of samples of one task: the 8 samples of a group share their prompt,
and an agent's prompt (system text, tool schemas) is often longer than what it samples
(``bench.peers``' GuessTool: 230 prompt tokens, up to 190 sampled). TRL's forward runs
every row whole, so each prompt is computed once per sample. Here the distinct prompts run
once, with a KV cache, and each row's completion runs on its prompt's cached keys and
values: the same logits (the same tokens at the same positions, the same masks), and the
same gradients, since autograd sums what flows into a shared prompt from every row that
reads it. ``bench.shared_prompt`` times it against the whole-row forward.

The prompt pass stops one token short: the completion pass starts at the prompt's last
token, so TRL's fused LM head scores the first sampled token and the rest just as it does
on whole rows (its patched forward passes the cache on to the model).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import DynamicCache


def distinct_prompts(
    prompt_ids: torch.Tensor, prompt_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The distinct (prompt, mask) rows and, for every row, the index of its distinct one.

    >>> ids = torch.tensor([[5, 6], [5, 6], [7, 6]])
    >>> distinct_prompts(ids, torch.ones_like(ids))
    (tensor([[5, 6],
            [7, 6]]), tensor([[1, 1],
            [1, 1]]), tensor([0, 0, 1]))
    """
    width = prompt_ids.size(1)
    rows, inverse = torch.unique(
        torch.cat([prompt_ids, prompt_mask], dim=1), dim=0, return_inverse=True
    )
    return rows[:, :width], rows[:, width:], inverse


def can_share_prompts(model: Any, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> bool:
    """Whether a shared-prompt forward saves anything and the model supports it: a prompt
    of two tokens or more that some rows share, no gradient checkpointing (which drops the
    KV cache while training)."""
    if prompt_ids.size(1) < 2 or getattr(model, "is_gradient_checkpointing", False):
        return False
    return distinct_prompts(prompt_ids, prompt_mask)[0].size(0) < prompt_ids.size(0)


def shared_prompt_forward(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int
) -> Any:
    """TRL's fused-head output (``log_probs``, ``entropy``: ``(B, logits_to_keep)``) for rows of
    ``prompt + completion`` whose last ``logits_to_keep`` tokens are the completion, with each
    distinct prompt computed once. ``model`` carries TRL's ``add_fused_lm_head``."""
    width = input_ids.size(1) - logits_to_keep
    prompts, masks, inverse = distinct_prompts(input_ids[:, :width], attention_mask[:, :width])
    cache = DynamicCache(config=model.config)
    model.base_model(
        input_ids=prompts[:, :-1],
        attention_mask=masks[:, :-1],
        past_key_values=cache,
        use_cache=True,
    )
    cache.batch_select_indices(inverse)  # each row reads its prompt's keys and values
    tail = input_ids[:, width - 1 :]
    labels = tail.masked_fill(attention_mask[:, width - 1 :] == 0, -100)
    return model(
        input_ids=tail,
        attention_mask=attention_mask,
        past_key_values=cache,
        labels=labels,
        fused_lm_head=True,
    )
