"""A forward pass that computes each distinct prompt once gives what whole rows give: the
same logprobs and entropies of the completion tokens and the same gradients, on the tiny
default model with TRL's fused LM head (the head the GRPO loss uses). Whole-batch training
through ``ServerGRPOTrainer`` is compared with TRL's own forward in test_trainer_grpo.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM
from trl.trainer.utils import add_fused_lm_head

from rollgym.trainer import shared_prompt
from rollgym.trainer.shared_prompt import (
    LENGTH_BUCKETS,
    can_share_prompts,
    completion_passes,
    passes_on,
    shared_prompt_forward,
)

PROMPT, COMPLETION, PROMPTS, SAMPLES = 24, 16, 8, 4  # 32 rows: passes by length


@pytest.fixture
def model(default_model_dir: Path, device: torch.device) -> Any:
    torch.manual_seed(0)
    loaded = AutoModelForCausalLM.from_pretrained(default_model_dir, dtype=torch.float32)
    add_fused_lm_head(loaded, temperature=0.7, outputs=("log_probs", "entropy"))
    return loaded.to(device).train()


def _batch(model: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``PROMPTS`` prompts (the first left-padded) of ``SAMPLES`` rows each, completions of
    mixed lengths right-padded, on the model's device: input ids, attention mask, completion
    mask."""
    vocab = model.config.vocab_size
    prompt_ids = torch.randint(3, vocab, (PROMPTS, PROMPT)).repeat_interleave(SAMPLES, 0)
    prompt_mask = torch.ones_like(prompt_ids)
    prompt_mask[:SAMPLES, :5] = 0
    prompt_ids[:SAMPLES, :5] = 0
    rows = PROMPTS * SAMPLES
    completions = torch.randint(3, vocab, (rows, COMPLETION))
    lengths = torch.randint(1, COMPLETION + 1, (rows,))
    completion_mask = (torch.arange(COMPLETION)[None] < lengths[:, None]).long()
    ids = torch.cat([prompt_ids, completions], 1)
    mask = torch.cat([prompt_mask, completion_mask], 1)
    return ids.to(model.device), mask.to(model.device), completion_mask.to(model.device)


def _whole_rows(model: Any, ids: torch.Tensor, mask: torch.Tensor) -> Any:
    """TRL's way: every row forward whole, only the completion's labels scored."""
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :-COMPLETION] = -100
    out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    return out.log_probs[:, -COMPLETION:], out.entropy[:, -COMPLETION:]


def _logps_and_grads(
    model: Any, forward: Any
) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    model.zero_grad()
    logps, entropy = forward()
    signs = torch.linspace(-1, 1, logps.size(0), device=logps.device)[:, None]
    (logps * signs).sum().backward()  # signed weights
    return logps.detach(), entropy.detach(), [p.grad.clone() for p in model.parameters()]


def test_each_prompt_once_gives_the_whole_rows_logprobs_entropies_and_gradients(model):
    ids, mask, completion_mask = _batch(model)
    whole = _logps_and_grads(model, lambda: _whole_rows(model, ids, mask))

    def shared() -> tuple[torch.Tensor, torch.Tensor]:
        out = shared_prompt_forward(model, ids, mask, COMPLETION, buckets=LENGTH_BUCKETS)
        return out.log_probs, out.entropy

    ours = _logps_and_grads(model, shared)
    assert len(completion_passes(completion_mask.sum(1))) > 1
    scored = completion_mask.bool()
    assert ours[0].shape == whole[0].shape == (PROMPTS * SAMPLES, COMPLETION)
    assert (ours[0][~scored] == 0).all()  # past a row's length: 0, as the loss masks it
    torch.testing.assert_close(ours[0][scored], whole[0][scored], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ours[1][scored], whole[1][scored], atol=1e-4, rtol=1e-4)
    for grad, expected in zip(ours[2], whole[2], strict=True):
        torch.testing.assert_close(grad, expected, atol=1e-5, rtol=1e-3)


def test_the_completions_run_in_passes_of_rows_of_similar_length(model):
    ids, mask, completion_mask = _batch(model)
    widths: list[int] = []
    model.register_forward_pre_hook(
        lambda _, args, kwargs: widths.append(kwargs["input_ids"].size(1)), with_kwargs=True
    )
    shared_prompt_forward(model, ids, mask, COMPLETION, buckets=4)

    lengths = completion_mask.sum(1)
    passes = completion_passes(lengths, 4)
    assert len(passes) > 1 and sorted(torch.cat(passes).tolist()) == list(range(32))
    assert widths == [int(lengths[rows].max()) + 1 for rows in passes]  # longest row + 1
    computed = sum(len(rows) * width for rows, width in zip(passes, widths, strict=True))
    assert computed < 32 * (COMPLETION + 1)  # fewer tokens than one padded pass


def test_it_runs_only_where_rows_share_a_prompt_and_the_model_keeps_its_cache(model, monkeypatch):
    monkeypatch.setattr(shared_prompt, "GPU_MIN_SKIPPED_TOKENS", 1)  # the floor: next test
    ids, mask, _ = _batch(model)
    prompts, prompt_mask = ids[:, :-COMPLETION], mask[:, :-COMPLETION]
    assert can_share_prompts(model, prompts, prompt_mask)
    one_each = prompts[::SAMPLES]
    assert not can_share_prompts(model, one_each, prompt_mask[::SAMPLES])
    assert not can_share_prompts(model, prompts[:, -1:], prompt_mask[:, -1:])
    model.config.layer_types = ["full_attention", "linear_attention"]  # a hybrid model
    assert not can_share_prompts(model, prompts, prompt_mask)
    model.config.layer_types = ["full_attention", "sliding_attention"]
    assert can_share_prompts(model, prompts, prompt_mask)
    model.gradient_checkpointing_enable()
    assert not can_share_prompts(model, prompts, prompt_mask)


def test_on_a_gpu_only_a_batch_that_skips_enough_shares_and_in_one_pass(model):
    ids, mask, completion_mask = _batch(model)
    prompts, prompt_mask = ids[:, :-COMPLETION], mask[:, :-COMPLETION]
    skipped = (PROMPTS * SAMPLES - PROMPTS) * PROMPT  # 576 prompt tokens not computed again
    on_cpu = model.device.type == "cpu"
    assert skipped < shared_prompt.GPU_MIN_SKIPPED_TOKENS
    assert can_share_prompts(model, prompts, prompt_mask) == on_cpu
    wide = prompts.repeat(1, shared_prompt.GPU_MIN_SKIPPED_TOKENS // skipped + 1)
    assert can_share_prompts(model, wide, prompt_mask.repeat(1, wide.size(1) // PROMPT))
    assert passes_on(model.device) == (LENGTH_BUCKETS if on_cpu else 1)
    passes: list[int] = []  # the completion passes (the prompt's runs the base model)
    model.register_forward_pre_hook(lambda *_: passes.append(1))
    shared_prompt_forward(model, ids, mask, COMPLETION)
    assert len(passes) == (len(completion_passes(completion_mask.sum(1))) if on_cpu else 1)
