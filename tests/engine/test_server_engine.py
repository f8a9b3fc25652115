"""The real vLLM engine behind ``PolicyEngine``: ids, logprobs, versions, weight swaps.

One engine for the module (it takes seconds to start); tests that swap weights restore
the original ones at the end, so the order of tests does not matter.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest
import pytest_asyncio
import torch
from engine_helpers import chunks, hf_logprobs, weight_updater

from rollgym.contract.wire import SamplingSettings
from rollgym.engine.config import EngineConfig
from rollgym.engine.errors import BadWeights
from rollgym.engine.vllm.engine import VLLMEngine
from rollgym.engine.weights.updater import WeightUpdater
from rollgym.server.conversation.codec import ChatCodec

pytestmark = pytest.mark.asyncio(loop_scope="module")
GREEDY = SamplingSettings(temperature=0.0, max_tokens=24)
MESSAGES = [{"role": "user", "content": "Guess a number from 1 to 16."}]


@pytest.fixture(scope="module")
def codec(default_model_dir) -> ChatCodec:
    return ChatCodec.from_model_dir(default_model_dir)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine(default_model_dir):
    config = EngineConfig(model_dir=default_model_dir, max_model_len=512, kv_cache_gib=0.5)
    async with VLLMEngine(config) as engine:
        yield engine


@pytest.fixture(scope="module")
def hf_model(default_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(default_model_dir, dtype=torch.float32).eval()


@pytest.fixture
def updater(engine, tmp_path_factory) -> WeightUpdater:
    # not tmp_path: the module's engine may read a served version's files again in a later
    # test (a test's own tmp_path is gone once it passed)
    return weight_updater(engine, tmp_path_factory.mktemp("weights") / "staging")


def hf_greedy(model, prompt: list[int], n: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False)
    return out[0, len(prompt) :].tolist()


def new_weights(model, path: Path, seed: int) -> bytes:
    """A differently initialised model, saved as a trainer would (tied head dropped)."""
    torch.manual_seed(seed)
    changed = type(model)(model.config).eval()
    changed.save_pretrained(path, safe_serialization=True)
    return (path / "model.safetensors").read_bytes()


async def test_sampled_ids_and_logprobs_are_the_policys_own(engine, codec, hf_model) -> None:
    prompt = codec.first_prompt(MESSAGES)
    settings = SamplingSettings(temperature=1.0, max_tokens=16)
    generation = await engine.generate(prompt, settings, request_id="logprobs")
    assert len(generation.token_ids) == len(generation.logprobs) >= 1
    assert generation.policy_version == engine.policy_version
    assert generation.prompt_tokens == len(prompt) and generation.model_s > 0
    expected = hf_logprobs(hf_model, prompt, generation.token_ids)
    for got, want in zip(generation.logprobs, expected, strict=True):
        assert math.isclose(got, want, abs_tol=2e-3), (got, want)


async def test_stop_token_ends_a_turn_and_is_kept(engine, codec) -> None:
    prompt = codec.first_prompt(MESSAGES)
    free = await engine.generate(prompt, GREEDY)
    stop = free.token_ids[2]
    cut = await engine.generate(prompt, GREEDY, stop_token_ids=[stop])
    first = free.token_ids.index(stop)
    assert cut.token_ids == free.token_ids[: first + 1] and cut.finish_reason == "stop"


async def test_a_stop_text_ends_the_generation_after_the_token_completing_it(engine, codec) -> None:
    prompt = codec.first_prompt(MESSAGES)
    free = await engine.generate(prompt, GREEDY)
    text = codec.decode(free.token_ids)
    middle = range(len(text) // 2, len(text) - 1)  # ASCII: no half-decoded characters
    stop = next(text[i : i + 2] for i in middle if text[i : i + 2].isascii())
    cut = await engine.generate(prompt, GREEDY, stop=[stop])
    assert cut.token_ids == free.token_ids[: len(cut.token_ids)] and cut.finish_reason == "stop"
    assert stop in codec.decode(cut.token_ids) and stop not in codec.decode(cut.token_ids[:-1])


async def test_a_seed_gives_the_same_sample_alone_or_batched_with_others(engine, codec) -> None:
    prompt = codec.first_prompt(MESSAGES)
    settings = SamplingSettings(temperature=1.0, top_p=0.9, max_tokens=16)
    alone = await engine.generate(prompt, settings, seed=7)
    batch = await asyncio.gather(
        *(engine.generate(prompt, settings, seed=7 if i % 2 else None) for i in range(6))
    )
    assert [g.token_ids for g in batch[1::2]] == [alone.token_ids] * 3
    assert any(g.token_ids != alone.token_ids for g in batch[::2])  # unseeded: free


async def test_a_turn_that_extends_the_last_one_is_served_from_the_prefix_cache(
    engine, codec
) -> None:
    prompt = codec.first_prompt([{"role": "user", "content": "A long opening. " * 12}])
    first = await engine.generate(prompt, GREEDY)
    context = (
        prompt
        + first.token_ids
        + codec.continuation(
            [{"role": "user", "content": "Higher."}], stopped=first.finish_reason == "stop"
        )
    )
    second = await engine.generate(context, GREEDY)
    block = engine.config.block_size  # the cache keeps whole blocks of the episode so far
    assert second.cached_tokens >= len(prompt) - block + 1


async def test_many_episodes_at_once(engine, codec) -> None:
    prompts = [codec.first_prompt([{"role": "user", "content": f"Task {i}."}]) for i in range(24)]
    settings = SamplingSettings(temperature=1.0, max_tokens=12)
    generations = await asyncio.gather(*(engine.generate(p, settings) for p in prompts))
    assert all(1 <= len(g.token_ids) <= 12 for g in generations)


async def test_an_update_gives_transformers_greedy_output_and_a_new_version(
    engine, codec, hf_model, updater, tmp_path
) -> None:
    from transformers import AutoModelForCausalLM

    prompt = codec.first_prompt(MESSAGES)
    before = await engine.generate(prompt, GREEDY)
    assert before.token_ids == hf_greedy(hf_model, prompt, len(before.token_ids))
    version = engine.policy_version
    data = new_weights(hf_model, tmp_path / "new", seed=1234)
    result = await updater.from_stream(chunks(data), expected_version=version)
    assert result.policy_version == engine.policy_version == version + 1

    after = await engine.generate(prompt, GREEDY)
    changed = AutoModelForCausalLM.from_pretrained(tmp_path / "new", dtype=torch.float32)
    assert after.token_ids == hf_greedy(changed.eval(), prompt, len(after.token_ids))
    assert after.token_ids != before.token_ids and after.policy_version == version + 1
    # put the original weights back for the other tests
    await updater.from_path(Path(hf_model.name_or_path), expected_version=version + 1)
    assert (await engine.generate(prompt, GREEDY)).token_ids == before.token_ids


async def test_an_update_resets_the_prefix_cache(engine, codec, hf_model, updater) -> None:
    prompt = codec.first_prompt([{"role": "user", "content": "A long opening. " * 12}])
    await engine.generate(prompt, GREEDY)
    assert (await engine.generate(prompt, GREEDY)).cached_tokens > 0
    version = engine.policy_version
    await updater.from_path(Path(hf_model.name_or_path), expected_version=version)
    # KV computed with the old weights is never reused, even for the same weights
    assert (await engine.generate(prompt, GREEDY)).cached_tokens == 0


async def test_an_update_reloaded_in_place_serves_what_a_staged_one_does(
    engine, codec, hf_model, updater, tmp_path
) -> None:
    prompt = codec.first_prompt(MESSAGES)
    data = new_weights(hf_model, tmp_path / "new", seed=4321)
    original = Path(hf_model.name_or_path)
    await updater.from_stream(chunks(data), expected_version=None)
    staged = await engine.generate(prompt, GREEDY)
    await updater.from_path(original, expected_version=None)
    engine.config = engine.config.model_copy(update={"staged_updates": False})
    try:
        await updater.from_stream(chunks(data), expected_version=None)
        in_place = await engine.generate(prompt, GREEDY)
    finally:
        engine.config = engine.config.model_copy(update={"staged_updates": True})
        await updater.from_path(original, expected_version=None)
    assert in_place.token_ids == staged.token_ids


async def test_a_bad_update_is_refused_and_the_old_weights_keep_serving(
    engine, codec, hf_model, updater, tmp_path
) -> None:
    prompt = codec.first_prompt(MESSAGES)
    before = await engine.generate(prompt, GREEDY)
    version = engine.policy_version
    good = new_weights(hf_model, tmp_path / "new", seed=7)
    with pytest.raises(BadWeights):
        await updater.from_stream(chunks(good[: len(good) // 2]), expected_version=None)
    state = {k: v.clone() for k, v in hf_model.state_dict().items() if k != "lm_head.weight"}
    state["model.norm.weight"] = torch.ones(3)
    from safetensors.torch import save

    with pytest.raises(BadWeights, match=r"model\.norm\.weight"):
        await updater.from_stream(chunks(save(state)), expected_version=None)
    assert engine.policy_version == version
    assert (await engine.generate(prompt, GREEDY)).token_ids == before.token_ids


async def _engine_idle(engine: VLLMEngine) -> None:
    """Until vLLM holds no request (an earlier test's may still be finishing, and would be
    counted as one of the next test's)."""
    for _ in range(3000):
        if engine.llm.get_num_unfinished_requests() == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the engine still had requests after 30 s")


async def _all_submitted(engine: VLLMEngine, tasks: list[asyncio.Task]) -> None:
    """Until vLLM holds every request (a fixed sleep is not enough on a loaded machine);
    call it on an idle engine (``_engine_idle``)."""
    for _ in range(3000):
        if sum(t.done() for t in tasks) + engine.llm.get_num_unfinished_requests() >= len(tasks):
            return
        await asyncio.sleep(0.01)  # vLLM offers no event to wait on
    raise AssertionError("the requests were not all submitted within 30 s")


@pytest.mark.parametrize("policy", ["finish", "abort"])
async def test_in_flight_requests_never_mix_versions(
    engine, codec, hf_model, updater, tmp_path, policy
) -> None:
    engine.config = engine.config.model_copy(update={"in_flight": policy})
    data = new_weights(hf_model, tmp_path / "new", seed=99)
    try:
        prompt = codec.first_prompt(MESSAGES)
        long = SamplingSettings(temperature=1.0, max_tokens=300)
        version = engine.policy_version
        await _engine_idle(engine)
        running = [asyncio.create_task(engine.generate(prompt, long)) for _ in range(8)]
        await _all_submitted(engine, running)
        await updater.from_stream(chunks(data), expected_version=version)
        generations = await asyncio.gather(*running)
        versions = {g.policy_version for g in generations}
        if policy == "finish":  # drained on the old weights before the swap
            assert versions == {version}
        else:  # aborted and run again from the start on the new weights
            assert version + 1 in versions and versions <= {version, version + 1}
        assert all(g.finish_reason in ("stop", "length") for g in generations)
    finally:
        engine.config = engine.config.model_copy(update={"in_flight": "finish"})
        await updater.from_path(Path(hf_model.name_or_path), expected_version=None)


async def test_scores_are_transformers_logprobs_of_the_same_tokens(engine, hf_model) -> None:
    tokens = [5, 17, 200, 33, 9, 400, 12, 71]
    scored = await engine.score(tokens)
    expected = hf_logprobs(hf_model, tokens[:1], tokens[1:])
    assert len(scored) == len(tokens) - 1
    for got, want in zip(scored, expected, strict=True):
        assert math.isclose(got, want, abs_tol=2e-3), (got, want)


async def test_the_canary_fires_exactly_when_the_served_weights_are_not_the_trainers(
    engine, hf_model, updater, tmp_path
) -> None:
    """The real twin of the fake server's canary: the probes of the pushed model pass, those
    of other weights (what a server that never loaded the update would serve) fire."""
    from prometheus_client import CollectorRegistry, Gauge
    from transformers import AutoModelForCausalLM

    from rollgym.server.observability.canary import check_served_weights
    from rollgym.trainer.canary import CanaryConfig, canary_probes

    gauge = Gauge("mismatch", "canary", registry=CollectorRegistry())
    config = CanaryConfig()
    data = new_weights(hf_model, tmp_path / "new", seed=99)
    pushed = AutoModelForCausalLM.from_pretrained(tmp_path / "new", dtype=torch.float32)
    version = engine.policy_version
    await updater.from_stream(chunks(data), expected_version=version)
    try:
        right = await check_served_weights(engine, canary_probes(pushed, config), gauge)
        wrong = await check_served_weights(engine, canary_probes(hf_model, config), gauge)
    finally:
        await updater.from_path(Path(hf_model.name_or_path), expected_version=version + 1)
    assert right.passed and right.mismatch < 2e-3 and right.policy_version == version + 1
    assert not wrong.passed and wrong.mismatch > 10 * config.tolerance
    assert gauge._value.get() == wrong.mismatch
