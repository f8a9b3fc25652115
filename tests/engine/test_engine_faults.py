"""The real engine under faults: non-finite weights never reach it, a worker that fails
while loading or midway through the swap leaves the old weights serving, and one that
hangs passes the swap's deadline, after which the engine restarts on the last good
weights. Each answer is a 503 (or a 422) with the reason, and the version does not move.
And a slow load does not hold sampling up: the old weights serve until the swap."""

from __future__ import annotations

import asyncio
import contextlib
import math
import shutil
from pathlib import Path

import pytest
import pytest_asyncio
import torch
from engine_helpers import weight_updater

from rollgym.contract.wire import SamplingSettings
from rollgym.engine.config import EngineConfig
from rollgym.engine.errors import BadWeights, EngineFailure
from rollgym.engine.vllm.engine import VLLMEngine
from rollgym.engine.weights.updater import WeightUpdater
from rollgym.server.conversation.codec import ChatCodec

pytestmark = pytest.mark.asyncio(loop_scope="module")
GREEDY = SamplingSettings(temperature=0.0, max_tokens=16)
DEADLINE_S = 8.0


class FaultyEngine(VLLMEngine):
    worker_extension = "faulty_worker.FaultyWorkerExtension"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine(default_model_dir):
    config = EngineConfig(
        model_dir=default_model_dir, max_model_len=512, kv_cache_gib=0.5, swap_timeout_s=DEADLINE_S
    )
    async with FaultyEngine(config) as engine:
        yield engine


@pytest.fixture(scope="module")
def prompt(default_model_dir) -> list[int]:
    codec = ChatCodec.from_model_dir(default_model_dir)
    return codec.first_prompt([{"role": "user", "content": "Guess a number from 1 to 16."}])


def weights_of_seed(model_dir: Path, folder: Path, seed: int) -> Path:
    """A differently initialised model of the same shape, saved as a trainer would."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    torch.manual_seed(seed)
    type(model)(model.config).save_pretrained(folder, safe_serialization=True)
    return folder / "model.safetensors"


@pytest.fixture(scope="module")
def other_weights(default_model_dir, tmp_path_factory) -> Path:
    return weights_of_seed(default_model_dir, tmp_path_factory.mktemp("seed7"), 7)


@pytest.fixture(scope="module")
def weights_dir(tmp_path_factory) -> Path:
    """The updaters' staging and policy store, as long-lived as the module's engine: a later
    test's failed update makes the engine reload the version it serves from there (a test's
    own tmp_path is gone once it passed)."""
    return tmp_path_factory.mktemp("weights")


def updater(engine: VLLMEngine, weights_dir: Path) -> WeightUpdater:
    return weight_updater(engine, weights_dir / "staging")


def named(source: Path, folder: Path, name: str) -> Path:
    folder.mkdir(exist_ok=True)
    return Path(shutil.copyfile(source, folder / name))


async def test_non_finite_weights_never_reach_the_engine(
    engine, prompt, other_weights, tmp_path, weights_dir
) -> None:
    from safetensors.torch import load_file, save_file

    before = await engine.generate(prompt, GREEDY)
    tensors = load_file(other_weights)
    name = sorted(tensors)[3]
    tensors[name][0, 0] = math.nan
    poisoned = tmp_path / "poisoned.safetensors"
    save_file(tensors, poisoned)
    with pytest.raises(BadWeights, match=f"{name} holds 1 non-finite"):
        await updater(engine, weights_dir).from_path(poisoned, expected_version=None)
    assert engine.policy_version == 0  # loaded beside the served weights, never swapped in
    assert (await engine.generate(prompt, GREEDY)).token_ids == before.token_ids
    good = named(other_weights, tmp_path / "good", "model.safetensors")
    assert (await updater(engine, weights_dir).from_path(good, None)).policy_version == 1


@pytest.mark.parametrize(
    "fault", ["fail-midway", "fail-swap"], ids=["while-loading", "midway-through-the-swap"]
)
async def test_a_worker_failing_mid_update_leaves_the_old_weights_serving(
    engine, prompt, other_weights, tmp_path, weights_dir, fault
) -> None:
    before = await engine.generate(prompt, GREEDY)
    version = engine.policy_version
    broken = named(other_weights, tmp_path / "in", f"{fault}.safetensors")
    with pytest.raises(EngineFailure, match="old weights keep serving"):
        await updater(engine, weights_dir).from_path(broken, expected_version=None)
    assert engine.policy_version == version
    after = await engine.generate(prompt, GREEDY)
    assert after.token_ids == before.token_ids and after.policy_version == version


async def test_the_old_weights_serve_while_an_update_loads(
    engine, prompt, other_weights, tmp_path, weights_dir
) -> None:
    version = engine.policy_version
    slow = named(other_weights, tmp_path / "in", "slow.safetensors")
    update = asyncio.create_task(
        updater(engine, weights_dir).from_path(slow, expected_version=None)
    )
    await _loading(engine)
    during = await engine.generate(prompt, GREEDY)
    assert not update.done() and during.policy_version == version
    assert (await update).policy_version == engine.policy_version == version + 1


async def _loading(engine: VLLMEngine) -> None:
    """Until the workers load an update (vLLM offers no event to wait on)."""
    for _ in range(2000):
        with contextlib.suppress(Exception):  # no staged update yet
            if await engine.llm.collective_rpc("rollgym_staged") == [None]:
                return
        await asyncio.sleep(0.01)
    raise AssertionError("the update did not start loading within 20 s")


async def test_a_hung_swap_passes_its_deadline_and_the_engine_restarts_on_the_old_weights(
    engine, prompt, other_weights, default_model_dir, tmp_path, weights_dir
) -> None:
    weights = updater(engine, weights_dir)
    good = named(other_weights, tmp_path / "in", "good.safetensors")
    applied = await weights.from_path(good, expected_version=None)  # the last good weights
    served = await engine.generate(prompt, GREEDY)
    assert applied.policy_version == engine.policy_version == served.policy_version

    third = weights_of_seed(default_model_dir, tmp_path / "seed8", 8)
    hung = named(third, tmp_path / "in", "hang.safetensors")
    with pytest.raises(EngineFailure, match=r"deadline.*restarted on the last good weights"):
        await weights.from_path(hung, expected_version=None)
    assert engine.policy_version == applied.policy_version
    after = await engine.generate(prompt, GREEDY)
    assert after.token_ids == served.token_ids  # the update's weights, not the base model's
    assert after.policy_version == applied.policy_version
    again = await weights.from_path(good, expected_version=applied.policy_version)
    assert again.policy_version == applied.policy_version + 1
