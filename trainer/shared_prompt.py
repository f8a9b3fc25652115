"""One forward pass per distinct prompt, not per sample: the GRPO loss's logprobs.

A GRPO batch is groups of samples of one task: the 8 samples of a group share their prompt,
and an agent's prompt (system text, tool schemas) is often longer than what it samples
(GuessTool in ``bench.peers`` of 2026-12-04: 230 prompt tokens, up to 190 sampled). TRL's forward runs
every row whole, so each prompt is computed once per sample. Here the distinct prompts run
once, with a KV cache, and each row's completion runs on its prompt's cached keys and
values: the same logits (the same tokens at the same positions, the same masks), and the
same gradients, since autograd sums what flows into a shared prompt from every row that
reads it. ``bench.shared_prompt`` times it against the whole-row forward.

The prompt pass stops one token short: the completion pass starts at the prompt's last
token, so TRL's fused LM head scores the first sampled token and the rest just as it does
on whole rows (its patched forward passes the cache on to the model). The completions run
in a few passes of rows of similar length (a whole batch padded to its longest completion
computes every padded token: in that ``bench.peers`` the mean completion was 60-72 tokens,
the longest 75-91).

On a GPU a pass has a fixed cost (its kernel launches) worth thousands of tokens, so there
the completions run in one pass, and only a batch that skips ``GPU_MIN_SKIPPED_TOKENS``
prompt tokens or more is shared (``python -m bench.shared_prompt --device cuda`` on an
H200: whole rows won where SmolLM2-135M skipped 1,380 prompt tokens and the tiny default
model 6,440; sharing in one pass won 13% where SmolLM2 skipped 6,440, 2.5x and 4.4x where it
skipped 28,672 and 46,080; passes by length lost to one pass in every batch).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F
from transformers import DynamicCache

LENGTH_BUCKETS = 4  # completion passes per forward at most, rows grouped by length...
ROWS_PER_PASS = 8  # ...of this many rows at least (fewer: small matrices, slower on a CPU)
PASS_TOKENS = 64  # what one more pass costs, in tokens (the default model: ~11 ms, 2 cores)
GPU_MIN_SKIPPED_TOKENS = 8192  # on a GPU, share only a batch that skips this many (see above)


@dataclasses.dataclass(frozen=True)
class SharedOutput:
    """What the GRPO loss reads of TRL's fused head: ``(B, logits_to_keep)`` each."""

    log_probs: torch.Tensor
    entropy: torch.Tensor


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
    """Whether a shared-prompt forward pays and the model supports it: a prompt of two
    tokens or more that some rows share, enough of them skipped on the batch's device
    (``skips_enough``), no gradient checkpointing (which drops the KV cache while
    training), attention layers only (a linear-attention layer's cache holds a state, not
    keys and values)."""
    if prompt_ids.size(1) < 2 or getattr(model, "is_gradient_checkpointing", False):
        return False
    layer_types = getattr(model.config, "layer_types", None) or ["full_attention"]
    if not set(layer_types) <= {"full_attention", "sliding_attention"}:
        return False
    distinct = distinct_prompts(prompt_ids, prompt_mask)[0].size(0)
    return skips_enough(prompt_ids.device, (prompt_ids.size(0) - distinct) * prompt_ids.size(1))


def skips_enough(device: torch.device, skipped_tokens: int) -> bool:
    """Whether skipping ``skipped_tokens`` prompt tokens pays for the shared forward's extra
    pass on ``device``: any on a CPU, ``GPU_MIN_SKIPPED_TOKENS`` elsewhere.

    >>> skips_enough(torch.device("cpu"), 24), skips_enough(torch.device("cuda"), 6440)
    (True, False)
    """
    floor = 1 if device.type == "cpu" else GPU_MIN_SKIPPED_TOKENS
    return skipped_tokens >= floor


def passes_on(device: torch.device) -> int:
    """The most completion passes a forward on ``device`` runs: ``LENGTH_BUCKETS`` on a
    CPU, one on a GPU (see the module docstring)."""
    return LENGTH_BUCKETS if device.type == "cpu" else 1


def completion_passes(lengths: torch.Tensor, most: int = LENGTH_BUCKETS) -> list[torch.Tensor]:
    """The rows of each completion pass: sorted by length and split into the number of
    passes (at most ``most``, of ``ROWS_PER_PASS`` rows or more) that computes the fewest
    tokens, each pass as long as its longest row and counted ``PASS_TOKENS`` more.

    >>> [rows.tolist() for rows in completion_passes(torch.tensor([90] * 8 + [5] * 8))]
    [[8, 9, 10, 11, 12, 13, 14, 15], [0, 1, 2, 3, 4, 5, 6, 7]]
    >>> len(completion_passes(torch.tensor([6] * 8 + [2] * 8)))  # too little to save
    1
    """
    order = lengths.argsort(stable=True)
    best: tuple[int, list[torch.Tensor]] | None = None
    for passes in range(1, max(1, min(most, len(order) // ROWS_PER_PASS)) + 1):
        split = list(order.tensor_split(passes))
        cost = sum(len(rows) * int(lengths[rows].max()) for rows in split) + passes * PASS_TOKENS
        if best is None or cost < best[0]:
            best = (cost, split)
    assert best is not None
    return best[1]


def shared_prompt_forward(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    *,
    buckets: int | None = None,
) -> SharedOutput:
    """TRL's fused-head outputs (``log_probs``, ``entropy``: ``(B, logits_to_keep)``) for rows of
    ``prompt + completion`` whose last ``logits_to_keep`` tokens are the completion
    (right-padded), with each distinct prompt computed once. ``model`` carries TRL's
    ``add_fused_lm_head``.

    The completions run in up to ``buckets`` passes (default: ``passes_on`` the batch's
    device) of rows of similar length (``completion_passes``), each as long as its longest
    row: a padded token costs what a sampled one does, and one pass over the whole batch
    would run every row to the longest completion. Outputs past a row's length are 0 (the
    loss masks them, as it does the whole-row forward's).
    """
    width = input_ids.size(1) - logits_to_keep
    prompts, masks, inverse = distinct_prompts(input_ids[:, :width], attention_mask[:, :width])
    prompt_cache = DynamicCache(config=model.config)
    model.base_model(
        input_ids=prompts[:, :-1],
        attention_mask=masks[:, :-1],
        past_key_values=prompt_cache,
        use_cache=True,
    )
    layers: list[Any] = list(prompt_cache.layers)
    lengths = attention_mask[:, width:].sum(dim=1)
    passes = completion_passes(lengths, buckets or passes_on(input_ids.device))
    log_probs, entropy = [], []
    for rows in passes:
        keep = max(int(lengths[rows].max()), 1)
        cache = DynamicCache(  # each row reads its prompt's keys and values
            [(layer.keys[inverse[rows]], layer.values[inverse[rows]]) for layer in layers],
            config=model.config,
        )
        tail = input_ids[rows, width - 1 : width + keep]
        labels = tail.masked_fill(attention_mask[rows, width - 1 : width + keep] == 0, -100)
        out = model(
            input_ids=tail,
            attention_mask=attention_mask[rows, : width + keep],
            past_key_values=cache,
            labels=labels,
            fused_lm_head=True,
        )
        log_probs.append(F.pad(out.log_probs, (0, logits_to_keep - keep)))
        entropy.append(F.pad(out.entropy, (0, logits_to_keep - keep)))
    back = torch.cat(passes).argsort()  # to the batch's own order
    return SharedOutput(torch.cat(log_probs)[back], torch.cat(entropy)[back])
