"""SmolLM2-135M-Instruct (a real pretrained model: 49k vocabulary, its own chat template,
llama with tied embeddings) behind ``PolicyEngine``: it answers, its logprobs are the
model's, and weight updates round-trip in float32 and bfloat16.

One engine for the module; tests that swap weights put the pulled ones back.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_asyncio
import torch
from engine_helpers import chunks, hf_logprobs, weight_updater

from rollgym.contract.wire import SamplingSettings
from rollgym.engine.config import EngineConfig
from rollgym.engine.vllm.engine import VLLMEngine
from rollgym.engine.weights.updater import WeightUpdater
from rollgym.models.catalog import CATALOG
from rollgym.server.conversation.codec import ChatCodec
from rollgym.trainer.weights import SafetensorsBody

pytestmark = pytest.mark.asyncio(loop_scope="module")
GREEDY = SamplingSettings(temperature=0.0, max_tokens=16)
ENTRY = CATALOG["smollm2-135m-instruct"]


@pytest.fixture(scope="module")
def codec(smollm2_dir) -> ChatCodec:
    return ChatCodec.from_model_dir(smollm2_dir)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine(smollm2_dir):
    config = EngineConfig(model_dir=smollm2_dir, max_model_len=1024, kv_cache_gib=0.5)
    async with VLLMEngine(config) as engine:
        yield engine


@pytest.fixture(scope="module")
def hf_model(smollm2_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()


@pytest.fixture
def updater(engine, tmp_path_factory) -> WeightUpdater:
    # not tmp_path: the module's engine may read a served version's files again in a later
    # test (a test's own tmp_path is gone once it passed)
    return weight_updater(engine, tmp_path_factory.mktemp("weights") / "staging")


async def test_it_answers_through_its_own_chat_template(engine, codec) -> None:
    prompt = codec.first_prompt([{"role": "user", "content": ENTRY.check_prompt}])
    text = codec.tokenizer.decode(prompt)
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    generation = await engine.generate(prompt, GREEDY, stop_token_ids=[codec.eos_id])
    assert ENTRY.check_answer in codec.decode(generation.token_ids)


async def test_sampled_logprobs_are_the_models_own(engine, codec, hf_model) -> None:
    prompt = codec.first_prompt([{"role": "user", "content": "Name three colours."}])
    settings = SamplingSettings(temperature=1.0, max_tokens=24)
    generation = await engine.generate(prompt, settings)
    expected = hf_logprobs(hf_model, prompt, generation.token_ids)
    gaps = [abs(got - want) for got, want in zip(generation.logprobs, expected, strict=True)]
    assert max(gaps) < 0.02, gaps  # float32 both sides; different kernels, 30 layers


async def test_a_second_turn_is_served_from_the_prefix_cache(engine, codec) -> None:
    prompt = codec.first_prompt([{"role": "user", "content": "Guess my number. " * 8}])
    first = await engine.generate(prompt, GREEDY, stop_token_ids=[codec.eos_id])
    reply = codec.continuation(
        [{"role": "user", "content": "Lower."}], stopped=first.finish_reason == "stop"
    )
    second = await engine.generate(prompt + first.token_ids + reply, GREEDY)
    assert second.cached_tokens >= len(prompt) - engine.config.block_size + 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
async def test_weight_updates_round_trip_with_tied_embeddings(
    engine, codec, hf_model, updater, smollm2_dir, dtype
) -> None:
    """The trainer's own push (``SafetensorsBody``: a tied tensor once), in either dtype."""
    import copy

    prompt = codec.first_prompt([{"role": "user", "content": "Say something."}])
    before = await engine.generate(prompt, GREEDY)
    changed = copy.deepcopy(hf_model).to(dtype)
    assert changed.lm_head.weight is changed.model.embed_tokens.weight  # tied
    with torch.no_grad():
        changed.model.embed_tokens.weight.mul_(0.5)
    version = engine.policy_version
    data = b"".join(SafetensorsBody.of(changed))
    result = await updater.from_stream(chunks(data), expected_version=version)
    assert result.policy_version == version + 1
    after = await engine.generate(prompt, SamplingSettings(temperature=1.0, max_tokens=8))
    expected = hf_logprobs(changed.float(), prompt, after.token_ids)
    assert max(abs(a - b) for a, b in zip(after.logprobs, expected, strict=True)) < 0.05
    await updater.from_path(Path(smollm2_dir), expected_version=version + 1)
    assert (await engine.generate(prompt, GREEDY)).token_ids == before.token_ids
