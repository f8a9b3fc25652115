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
        return count
