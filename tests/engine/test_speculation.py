"""Speculative decoding on the real engine: drafts are accepted, and the logprobs a
trajectory records are still the target model's (checked against transformers)."""

from __future__ import annotations

import pytest
import pytest_asyncio
import torch

from rollgym.contract.wire import SamplingSettings
from rollgym.server.chat import ChatCodec
from rollgym.server.config import EngineConfig, SpeculationConfig
from rollgym.server.engine.vllm_engine import VLLMEngine
from rollgym.server.rollout.environments import RegistryEnvs
from rollgym.server.rollout.episode import EpisodeRunner, EpisodeSpec

# Near-greedy sampling makes the random default model repeat itself, which n-gram drafts
# predict; the logprobs are those of the distribution sampled (logits / temperature).
TEMPERATURE = 0.2
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine(default_model_dir):
    config = EngineConfig(
        model_dir=default_model_dir,
        max_model_len=512,
        speculation=SpeculationConfig(enabled=True, gate=False),
    )
    async with VLLMEngine(config) as engine:
        yield engine


def hf_processed_logprobs(model, context: list[int], positions: list[int]) -> list[float]:
    """log softmax(logits / T) of the token at each of ``positions`` in ``context``."""
    with torch.no_grad():
        logits = model(torch.tensor([context])).logits[0].float()
    logprobs = torch.log_softmax(logits / TEMPERATURE, dim=-1)
    return [logprobs[p - 1, context[p]].item() for p in positions]


async def test_a_trajectory_sampled_with_drafts_records_the_target_models_logprobs(
    engine, default_model_dir
) -> None:
    from transformers import AutoModelForCausalLM

    codec = ChatCodec.from_model_dir(default_model_dir)
    runner = EpisodeRunner(engine, codec, RegistryEnvs(lambda: None), max_model_len=512)
    before = engine.meter.totals()
    spec = EpisodeSpec(
        env_id="rollgym/GuessNumber-v0",
        env_kwargs={},
        task_seed=3,
        group_id="spec",
        sampling=SamplingSettings(temperature=TEMPERATURE, max_tokens=48),
        max_turns=2,
    )
    trajectory = await runner.run(spec)
    drafted = engine.meter.totals().drafted - before.drafted
    accepted = engine.meter.totals().accepted - before.accepted
    assert drafted > 0 and accepted > 0, "no draft was accepted: the test proves nothing"

    model = AutoModelForCausalLM.from_pretrained(default_model_dir, dtype=torch.float32)
    context = trajectory.prompt_ids + trajectory.completion_ids
    start = len(trajectory.prompt_ids)
    positions = [start + i for i, m in enumerate(trajectory.loss_mask) if m]
    recorded = [trajectory.logprobs[p - start] for p in positions]
    expected = hf_processed_logprobs(model, context, positions)
    gaps = [abs(a - b) for a, b in zip(recorded, expected, strict=True)]
    assert max(gaps) < 0.02, gaps


async def test_drafting_switches_off_and_on(engine) -> None:
    prompt = [5, 6, 7, 8] * 8
    settings = SamplingSettings(temperature=0.0, max_tokens=32)
    await engine.set_drafting(False)
    before = engine.meter.totals()
    await engine.generate(prompt, settings)
    assert engine.meter.totals().drafted == before.drafted
    await engine.set_drafting(True)
    await engine.generate(prompt, settings)
    assert engine.meter.totals().drafted > before.drafted
