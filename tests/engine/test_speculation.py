"""Speculative decoding on the real engine: drafts are accepted, the logprobs a trajectory
records are still the target model's (checked against transformers), the gate's replay of
the drafter matches a drafting engine's counters, and a switch of engines loses nothing."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
import pytest_asyncio
import torch

from rollgym.contract.wire import SamplingSettings
from rollgym.engine.config import EngineConfig, SpeculationConfig
from rollgym.engine.vllm.engine import VLLMEngine
from rollgym.server.conversation.codec import ChatCodec
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


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gated(default_model_dir):
    """A gated engine whose windows never close: the tests switch it themselves."""
    speculation = SpeculationConfig(enabled=True, window_tokens=10**9, window_s=10**9)
    config = EngineConfig(
        model_dir=default_model_dir, max_model_len=512, kv_cache_gib=0.5, speculation=speculation
    )
    async with VLLMEngine(config) as engine:
        yield engine


REPEATING = [5, 6, 7, 8] * 8  # the random model continues it greedily with repeats
GREEDY = SamplingSettings(temperature=0.0, max_tokens=48)


async def test_the_replayed_drafts_are_what_the_speculative_engine_drafts(gated) -> None:
    assert not gated.drafting  # the gate starts plain
    controller = gated.speculation
    prompts = [REPEATING[i:] for i in range(4)]
    before = gated.meter.totals()
    plain = [await gated.generate(p, GREEDY) for p in prompts]
    await controller.step()  # replays what was served
    shadow = gated.meter.totals()
    assert shadow.drafted == before.drafted, "a plain engine drafted"
    replayed_drafted = shadow.shadow_drafted - before.shadow_drafted
    replayed_accepted = shadow.shadow_accepted - before.shadow_accepted
    assert replayed_drafted > 0 and replayed_accepted > 0, "no draft to compare: proves nothing"
    assert shadow.shadow_tokens - before.shadow_tokens == sum(len(g.token_ids) for g in plain)

    await gated.set_drafting(True)
    assert gated.drafting
    drafting = [await gated.generate(p, GREEDY) for p in prompts]
    after = gated.meter.totals()
    assert [g.token_ids for g in drafting] == [g.token_ids for g in plain]
    # greedy: the same tokens, so the same drafts and the same verdicts on them, except
    # at each generation's end, where vLLM drafts past the length cap (up to k per prompt)
    k = gated.config.speculation.num_speculative_tokens
    drafted, accepted = after.drafted - shadow.drafted, after.accepted - shadow.accepted
    assert replayed_drafted <= drafted <= replayed_drafted + k * len(prompts)
    assert replayed_accepted <= accepted <= replayed_accepted + k * len(prompts)
    await gated.set_drafting(False)
    assert not gated.drafting


@pytest.mark.parametrize("swap_timeout_s", [60.0, 0.01], ids=["drained", "aborted-and-rerun"])
async def test_requests_running_at_a_switch_complete_at_the_same_version(
    gated, monkeypatch, swap_timeout_s
) -> None:
    """Requests the old engine holds when the new one takes over: the old engine finishes
    them, or past the deadline aborts them and the new engine runs them again.

    The precondition is built, not hoped for: the old engine's scheduler is paused
    (vLLM's ``keep`` mode) before the requests are submitted, so none can finish before the
    switch, however fast the machine; it resumes when the switch retires it."""
    monkeypatch.setattr(
        gated, "config", gated.config.model_copy(update={"swap_timeout_s": swap_timeout_s})
    )
    held_at_flip: list[int] = []
    retire = gated._retire

    async def resumed_then_retired(old):
        held_at_flip.append(old.output_processor.get_num_unfinished_requests())
        await old.resume_generation()
        await retire(old)

    monkeypatch.setattr(gated, "_retire", resumed_then_retired)
    version, swaps = gated.policy_version, gated._swaps
    long = SamplingSettings(temperature=1.0, max_tokens=400)
    await gated.llm.pause_generation(mode="keep", clear_cache=False)
    requests = [asyncio.create_task(gated.generate(REPEATING, long)) for _ in range(48)]
    await asyncio.sleep(0.2)  # submitted to the paused plain engine
    await gated.set_drafting(True)  # starts a speculative engine while they are held
    later = await gated.generate(REPEATING, GREEDY)
    done = await asyncio.gather(*requests)
    assert held_at_flip == [48], "the old engine did not hold every request at the switch"
    rerun = gated._swaps - swaps  # 1 when the deadline aborted the held requests
    assert rerun == (0 if swap_timeout_s == 60.0 else 1)
    ends = {(g.finish_reason, len(g.token_ids) if g.finish_reason == "length" else 0) for g in done}
    assert ends <= {("stop", 0), ("length", 400)}  # none aborted, none cut short
    assert {g.policy_version for g in [*done, later]} == {version}
    drafted = gated.meter.totals().drafted
    await gated.set_drafting(False)
    await gated.generate(REPEATING, GREEDY)
    assert gated.meter.totals().drafted == drafted  # plain again: nothing drafted


def engine_processes() -> set[int]:
    """This process's live vLLM engine-core children (vLLM names them ``VLLM::EngineCore``)."""
    import psutil

    live = set()
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):  # it ended meanwhile
            if "EngineCore" in child.name() and child.status() != psutil.STATUS_ZOMBIE:
                live.add(child.pid)
    return live


async def test_closing_during_a_switch_leaves_no_engine_running(default_model_dir) -> None:
    before = engine_processes()
    config = EngineConfig(
        model_dir=default_model_dir,
        max_model_len=512,
        kv_cache_gib=0.5,
        speculation=SpeculationConfig(enabled=True, window_tokens=10**9, window_s=10**9),
    )
    engine = VLLMEngine(config)
    await engine.start()
    switch = asyncio.create_task(engine.set_drafting(True))
    await asyncio.sleep(0.5)  # the drafting engine is starting
    switch.cancel()
    await engine.close()
    assert engine_processes() - before == set()
