"""The real vLLM engine (CPU build) loads the default model and samples with logprobs."""

import math
import sys

import pytest


@pytest.fixture
def llvmlite_hidden(monkeypatch):
    """vLLM 0.32's in-process worker scans every loaded module's attributes for Triton
    kernels and fails on llvmlite's lazy library object (``'_lib_fn_wrapper' object has no
    attribute 'get'``), loaded in this process once a test compiled vLLM's n-gram drafter
    with numba (the speculation gate's replay does). Hide the modules holding it while the
    engine starts. Served engines never meet it: vLLM's CPU platform spawns their engine
    processes afresh."""
    ffi = sys.modules.get("llvmlite.binding.ffi")
    if ffi is None:
        return
    for name, module in list(sys.modules.items()):
        namespace = getattr(module, "__dict__", None)
        if isinstance(namespace, dict) and any(v is ffi.lib for v in namespace.values()):
            monkeypatch.delitem(sys.modules, name)


@pytest.mark.usefixtures("llvmlite_hidden")
def test_engine_generates_tokens_with_logprobs(default_model_dir) -> None:
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams

    tok = AutoTokenizer.from_pretrained(default_model_dir)
    llm = LLM(
        model=str(default_model_dir),
        dtype="float32",
        enforce_eager=True,
        max_model_len=1024,
        seed=0,
    )
    text = tok.apply_chat_template(
        [{"role": "user", "content": "Guess a number."}], tokenize=False, add_generation_prompt=True
    )
    prompt_ids = tok(text, add_special_tokens=False)["input_ids"]
    params = SamplingParams(max_tokens=16, temperature=1.0, logprobs=0, ignore_eos=True, seed=7)
    [out] = llm.generate([{"prompt_token_ids": list(prompt_ids)}], params, use_tqdm=False)
    sample = out.outputs[0]
    assert len(sample.token_ids) == 16
    assert len(sample.logprobs) == 16
    for token_id, step in zip(sample.token_ids, sample.logprobs, strict=True):
        assert token_id in step
        assert step[token_id].logprob <= 0.0 and math.isfinite(step[token_id].logprob)
    # Greedy decoding of the same prompt is reproducible.
    greedy = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
    a, b = (
        llm.generate([{"prompt_token_ids": list(prompt_ids)}], greedy, use_tqdm=False)[0]
        .outputs[0]
        .token_ids
        for _ in range(2)
    )
    assert list(a) == list(b)
