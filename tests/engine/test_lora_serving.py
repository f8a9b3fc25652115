"""The real vLLM engine serving LoRA adapters (``engine.lora``): the adapter a trainer pushes
is the policy served, each version its own adapter, and the canary tells a wrong one.

One engine for the module; the adapters come from peft on the default model, pushed as the
trainer pushes them (``SafetensorsBody`` of ``adapter_tensors``) through the updater.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
import pytest_asyncio
import torch
from engine_helpers import assert_close, chunks, hf_logprobs, weight_updater
from peft import get_peft_model

from rollgym.contract.wire import SamplingSettings
from rollgym.engine.config import EngineConfig, LoraServingConfig
from rollgym.engine.errors import NotEnabled
from rollgym.engine.vllm.engine import VLLMEngine
from rollgym.engine.weights.store import PolicyStore
from rollgym.engine.weights.updater import restore_policy
from rollgym.trainer.lora import LoraSettings, adapter_tensors
from rollgym.trainer.weights import SafetensorsBody

pytestmark = pytest.mark.asyncio(loop_scope="module")
TOKENS = [5, 17, 200, 33, 9, 400, 12, 71, 8, 3]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine(default_model_dir):
    config = EngineConfig(
        model_dir=default_model_dir,
        max_model_len=512,
        kv_cache_gib=0.5,
        lora=LoraServingConfig(max_rank=8),
    )
    async with VLLMEngine(config) as engine:
        yield engine


def lora_model(model_dir: Path, seed: int):
    """The default model with rank-8 adapters on attention and MLP, B drawn at random (peft
    starts it at zero: an adapter that changes nothing would prove nothing)."""
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model = get_peft_model(base, LoraSettings(rank=8).peft_config()).eval()
    torch.manual_seed(seed)
    for name, param in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.2)
    return model


def upload(model) -> bytes:
    """The adapter as ``trainer.weights`` sends it with ``trainer.lora.serve='adapter'``."""
    return b"".join(bytes(part) for part in SafetensorsBody(*adapter_tensors(model)))


async def served_logprobs(engine: VLLMEngine) -> list[float]:
    return await engine.score(TOKENS)


async def test_the_served_policy_is_the_base_model_plus_the_pushed_adapter(
    engine, default_model_dir, tmp_path
) -> None:
    base = await served_logprobs(engine)
    model = lora_model(default_model_dir, seed=1)
    version = engine.policy_version
    result = await weight_updater(engine, tmp_path / "staging").from_stream(
        chunks(upload(model)), expected_version=version
    )
    assert result.policy_version == engine.policy_version == version + 1
    assert result.bytes < 0.5 * sum(p.numel() * 4 for p in model.get_base_model().parameters())
    served = await served_logprobs(engine)
    assert_close(served, hf_logprobs(model, TOKENS[:1], TOKENS[1:]))
    assert max(abs(a - b) for a, b in zip(served, base, strict=True)) > 0.05  # it changed
    greedy = SamplingSettings(temperature=0.0, max_tokens=8)
    generation = await engine.generate(TOKENS, greedy)
    assert generation.policy_version == version + 1
    with torch.no_grad():
        expected = model.generate(torch.tensor([TOKENS]), max_new_tokens=8, do_sample=False)
    assert generation.token_ids == expected[0, len(TOKENS) :].tolist()[: len(generation.token_ids)]


async def test_the_canary_fires_when_the_adapter_served_is_not_the_trainers(
    engine, default_model_dir, tmp_path
) -> None:
    from prometheus_client import CollectorRegistry, Gauge

    from rollgym.server.observability.canary import check_served_weights
    from rollgym.trainer.canary import CanaryConfig, canary_probes

    gauge = Gauge("mismatch", "canary", registry=CollectorRegistry())
    pushed, other = lora_model(default_model_dir, seed=2), lora_model(default_model_dir, seed=3)
    updater = weight_updater(engine, tmp_path / "staging")
    await updater.from_stream(chunks(upload(pushed)), expected_version=None)
    right = await check_served_weights(engine, canary_probes(pushed, CanaryConfig()), gauge)
    wrong = await check_served_weights(engine, canary_probes(other, CanaryConfig()), gauge)
    assert right.passed and right.mismatch < 2e-3
    assert not wrong.passed and wrong.mismatch > 10 * CanaryConfig().tolerance


@pytest.mark.parametrize("policy", ["finish", "abort"])
async def test_running_requests_keep_one_adapter_and_old_adapters_are_unloaded(
    engine, default_model_dir, tmp_path, policy
) -> None:
    """``finish``: running requests end on the adapter they started with; ``abort``: they
    run again from the start on the new one. Either way no pause, and one version each."""
    engine.config = engine.config.model_copy(update={"in_flight": policy})
    try:
        await _swap_under_load(engine, default_model_dir, tmp_path, policy)
    finally:
        engine.config = engine.config.model_copy(update={"in_flight": "finish"})


async def _swap_under_load(engine, default_model_dir, tmp_path, policy) -> None:
    updater = weight_updater(engine, tmp_path / "staging")
    await updater.from_stream(chunks(upload(lora_model(default_model_dir, 4))), None)
    version = engine.policy_version
    long = SamplingSettings(temperature=1.0, max_tokens=200)
    running = [asyncio.create_task(engine.generate(TOKENS, long, seed=i)) for i in range(6)]
    for _ in range(3000):  # until vLLM holds them all (it offers no event to wait on)
        if engine.llm.get_num_unfinished_requests() >= len(running):
            break
        await asyncio.sleep(0.01)
    await updater.from_stream(chunks(upload(lora_model(default_model_dir, 5))), None)
    assert not all(task.done() for task in running)  # the swap did not wait for them
    after = await engine.generate(TOKENS, SamplingSettings(temperature=1.0, max_tokens=4))
    generations = await asyncio.gather(*running)
    moved = version if policy == "finish" else version + 1
    assert {g.policy_version for g in generations} == {moved}
    assert all(g.finish_reason in ("stop", "length") for g in generations)
    assert after.policy_version == version + 1
    await updater.from_stream(chunks(upload(lora_model(default_model_dir, 6))), None)
    loaded = await engine.llm.list_loras()
    assert len(loaded) == 1  # idle adapters of older versions are gone


async def test_a_turn_is_cached_per_adapter_never_across_versions(
    engine, default_model_dir, tmp_path
) -> None:
    prompt = TOKENS * 8
    greedy = SamplingSettings(temperature=0.0, max_tokens=4)
    await engine.generate(prompt, greedy)
    assert (await engine.generate(prompt, greedy)).cached_tokens > 0
    updater = weight_updater(engine, tmp_path / "staging")
    await updater.from_stream(chunks(upload(lora_model(default_model_dir, 7))), None)
    assert (await engine.generate(prompt, greedy)).cached_tokens == 0


async def test_whole_weights_are_refused_and_a_restart_serves_the_last_adapter(
    engine, default_model_dir, tmp_path
) -> None:
    updater = weight_updater(engine, tmp_path / "staging")
    model = lora_model(default_model_dir, seed=8)
    await updater.from_stream(chunks(upload(model)), None)
    version = engine.policy_version
    with pytest.raises(NotEnabled, match=r"engine\.lora"):
        await updater.from_path(default_model_dir, expected_version=None)
    assert engine.policy_version == version
    # what a restarted server does at start: the store's last adapter, at its version
    await restore_policy(engine, PolicyStore(tmp_path / "policy"), tmp_path / "staging", {})
    assert engine.policy_version == version
    assert_close(await served_logprobs(engine), hf_logprobs(model, TOKENS[:1], TOKENS[1:]))


async def test_an_adapter_evicted_by_vllm_comes_back_from_the_engines_own_copy(
    engine, default_model_dir, tmp_path
) -> None:
    """vLLM's LRU cache may evict an adapter that requests still use and read it again from
    its path, after the store has removed a replaced version's files: the engine loads each
    adapter from a copy it owns until it unloads it."""
    updater = weight_updater(engine, tmp_path / "staging")
    model = lora_model(default_model_dir, seed=9)
    await updater.from_stream(chunks(upload(model)), None)
    for folder in (tmp_path / "policy").iterdir():  # what the store's retire does
        if folder.is_dir():
            shutil.rmtree(folder)
    _, serving = engine._adapters.serving  # what vLLM's eviction would drop
    assert await engine.llm.remove_lora(serving.lora_int_id)
    assert_close(await served_logprobs(engine), hf_logprobs(model, TOKENS[:1], TOKENS[1:]))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def smollm2_engine(smollm2_dir):
    """SmolLM2: its logits go through vLLM's LoRA logits layer; the default model's did not
    reproduce the failure below."""
    config = EngineConfig(
        model_dir=smollm2_dir, max_model_len=1024, kv_cache_gib=0.5, lora=LoraServingConfig()
    )
    async with VLLMEngine(config) as engine:
        yield engine


@pytest.mark.parametrize("policy", ["finish", "abort"])
async def test_a_score_while_requests_run_is_right_and_leaves_them_whole(
    smollm2_engine, smollm2_dir, tmp_path, policy
) -> None:
    """vLLM's CPU LoRA path kills the engine core when a prompt-logprobs request (the
    canary's score) shares a step with others (its logits' adapter rows are indexed per
    request, not per prompt position): the engine scores alone, like a pause."""
    engine = smollm2_engine
    engine.config = engine.config.model_copy(update={"in_flight": policy})
    updater = weight_updater(engine, tmp_path / "staging")
    model = lora_model(smollm2_dir, seed=10)
    await updater.from_stream(chunks(upload(model)), None)
    long = SamplingSettings(temperature=1.0, max_tokens=120)
    running = [asyncio.create_task(engine.generate(TOKENS, long, seed=i)) for i in range(3)]
    for _ in range(3000):
        if engine.llm.get_num_unfinished_requests() >= len(running):
            break
        await asyncio.sleep(0.01)
    probe = list(range(40, 72))  # the canary's length: 32 tokens
    try:
        scored = await engine.score(probe)
        generations = await asyncio.gather(*running)
    finally:
        engine.config = engine.config.model_copy(update={"in_flight": "finish"})
    assert_close(scored, hf_logprobs(model, probe[:1], probe[1:]))
    assert all(g.finish_reason in ("stop", "length") for g in generations)
