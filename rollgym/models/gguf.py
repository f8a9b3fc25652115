"""A GGUF checkpoint (llama.cpp's format) to a plain Hugging Face model directory.

transformers reads GGUF itself (``from_pretrained(dir, gguf_file=...)``, with the ``gguf``
package): it dequantizes every tensor to float32, undoes llama.cpp's permutation of the
attention weights and rebuilds the tokenizer and chat template from the file's metadata. What
it refuses is to *save* such a model ("quantized with GGUF, not serializable"): the loaded
model still carries the GGUF quantization marker, although its tensors are plain float32
by then. ``convert_gguf`` drops the marker and saves config, tokenizer and safetensors, so
vLLM, transformers and TRL load the result like any checkpoint.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


class ConversionError(Exception):
    """The GGUF file cannot be read as a model (a corrupt file, an unknown architecture)."""


def convert_gguf(gguf_file: Path, out_dir: Path) -> Path:
    """Write ``gguf_file`` as a float32 Hugging Face directory into ``out_dir``; return it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    os.environ.setdefault("TQDM_DISABLE", "1")  # the GGUF reader's own bar, 272 lines of it
    try:
        folder, name = str(gguf_file.parent), gguf_file.name
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model: Any = AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=name, dtype=torch.float32
        )
    except Exception as exc:  # transformers and gguf raise many types for a bad file
        raise ConversionError(f"{gguf_file.name} is not a readable GGUF model: {exc}") from exc
    # The tensors are float32 now; only the marker says otherwise (see the module docstring).
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir
