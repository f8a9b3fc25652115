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
