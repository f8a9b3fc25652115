"""Import TRL's GRPO trainer without vLLM, in a process that trains against a server.

TRL's generation package imports vLLM whenever it is installed (``trl/generation``: its
``VLLMGeneration`` and ``VLLMClient``), and TRL's GRPO module imports that package. rollgym's
trainer never samples with TRL's vLLM (the rollout server does), yet the import cost each
trainer process 170 MiB of resident memory at import and about 300 MiB at a step's peak
(a probe of ``bench.lora``'s merged-LoRA arm on SmolLM2, one run each: 2313 against
2023 MiB; docs/benchmarks.md).

A process that means to train only against a rollout server (``rollgym run``, ``rollgym
train``) calls :func:`import_trl_without_vllm` before anything imports TRL's trainers. TRL's
vLLM generation is then unusable in that process; a process that uses it (``bench.peers``'
TRL-alone arm, colocated vLLM) must not call it.
"""

from __future__ import annotations

import sys


def import_trl_without_vllm() -> bool:
    """Import TRL's generation package with TRL's ``is_vllm_available`` answering no, then
    restore the check. Returns whether it did: a process that has imported that package
    already (or vLLM itself) is left as it is."""
    if "trl.generation" in sys.modules or "vllm" in sys.modules:
        return False
    import trl.import_utils as trl_imports

    check = trl_imports.is_vllm_available
    trl_imports.is_vllm_available = _never
    try:
        import trl.generation.vllm_generation  # noqa: F401
    finally:
        trl_imports.is_vllm_available = check
    return True


def _never(*_args: object, **_kwargs: object) -> bool:
    return False
