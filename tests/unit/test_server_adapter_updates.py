"""LoRA adapters as weight updates: checked against the base model, placed as vLLM reads
them, persisted and restored; the wrong kind for a server is refused with what to change.

The fake engine stands in for vLLM here; tests/engine/test_lora_serving.py is the real twin.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
import torch
from safetensors.torch import save

from rollgym.contract.adapter import (
    ADAPTER_CONFIG,
    ADAPTER_FILE,
    ADAPTER_METADATA,
    AdapterShape,
    served_lora_rank,
)
from rollgym.engine.base import AdapterWeights, StagedWeights, TensorSpec
from rollgym.engine.config import EngineConfig, LoraServingConfig
from rollgym.engine.errors import BadWeights, NotEnabled
from rollgym.engine.fake import FakeEngine
from rollgym.engine.metrics import NullMetrics
from rollgym.engine.weights.adapter import (
    check_adapter,
    shape_in_peft_config,
)
from rollgym.engine.weights.store import PolicyStore
from rollgym.engine.weights.updater import WeightUpdater, restore_policy

# A base model of two linear layers: q_proj (out 6, in 4) and down_proj (out 4, in 5).
MANIFEST = {
    "model.layers.0.self_attn.q_proj.weight": TensorSpec("F32", (6, 4)),
    "model.layers.0.mlp.down_proj.weight": TensorSpec("F32", (4, 5)),
    "model.norm.weight": TensorSpec("F32", (4,)),
}
SHAPE = AdapterShape(rank=2, alpha=4, target_modules=("q_proj", "down_proj"))
PREFIX = "base_model.model.model.layers.0"


def adapter_tensors(rank: int = 2) -> dict[str, torch.Tensor]:
    return {
        f"{PREFIX}.self_attn.q_proj.lora_A.weight": torch.randn(rank, 4),
        f"{PREFIX}.self_attn.q_proj.lora_B.weight": torch.randn(6, rank),
        f"{PREFIX}.mlp.down_proj.lora_A.weight": torch.randn(rank, 5),
        f"{PREFIX}.mlp.down_proj.lora_B.weight": torch.randn(4, rank),
    }


def upload(tensors: dict[str, torch.Tensor], shape: AdapterShape = SHAPE) -> bytes:
    return save(tensors, metadata={ADAPTER_METADATA: shape.model_dump_json()})


async def chunks(data: bytes, size: int = 64) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def adapter_engine(max_lora_rank: int | None = 8) -> FakeEngine:
    return FakeEngine(lambda _: [1], manifest=MANIFEST, max_lora_rank=max_lora_rank)


def updater(engine: FakeEngine, tmp_path) -> WeightUpdater:
    store = PolicyStore(tmp_path / "policy")
    return WeightUpdater(
        engine, tmp_path / "staging", store, max_bytes=1 << 20, metrics=NullMetrics()
    )


async def test_an_uploaded_adapter_is_served_as_vllm_reads_it_and_persisted(tmp_path) -> None:
    engine = adapter_engine()
    tensors = adapter_tensors()
    result = await updater(engine, tmp_path).from_stream(chunks(upload(tensors)), None)
    assert result.policy_version == engine.policy_version == 1
    (served,) = engine.swapped
    assert isinstance(served, AdapterWeights) and served.rank == 2
    config = json.loads((served.directory / ADAPTER_CONFIG).read_text())
    assert (config["r"], config["lora_alpha"], config["peft_type"]) == (2, 4.0, "LORA")
    assert config["target_modules"] == ["q_proj", "down_proj"] and not config["use_dora"]
    from safetensors.torch import load_file

    kept = load_file(served.directory / ADAPTER_FILE)
    assert all(torch.equal(kept[name], tensor) for name, tensor in tensors.items())
    # a restarted server serves the same adapter at the same version
    restarted = adapter_engine()
    restored = await restore_policy(
        restarted, PolicyStore(tmp_path / "policy"), tmp_path / "staging", {}
    )
    assert restored is None and restarted.policy_version == 1
    assert restarted.swapped == [served]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t.pop(f"{PREFIX}.mlp.down_proj.lora_B.weight"), "pairs"),
        (
            lambda t: t.update({f"{PREFIX}.mlp.down_proj.lora_B.weight": torch.randn(5, 2)}),
            "not a float",
        ),
        (
            lambda t: t.update({f"{PREFIX}.self_attn.k_proj.lora_A.weight": torch.randn(2, 4)}),
            "no linear layer",
        ),
        (lambda t: t.update({"model.norm.weight": torch.ones(4)}), "not a LoRA matrix"),
        (
            lambda t: t.update({"base_model.model.model.norm.lora_A.weight": torch.ones(2, 4)}),
            "no linear layer",
        ),
        (lambda t: t.clear(), "no LoRA matrices"),
    ],
)
async def test_an_adapter_that_does_not_fit_the_base_model_is_refused(
    tmp_path, change, message
) -> None:
    engine = adapter_engine()
    tensors = adapter_tensors()
    change(tensors)
    data = (
        upload(tensors)
        if tensors
        else save({}, metadata={ADAPTER_METADATA: SHAPE.model_dump_json()})
    )
    with pytest.raises(BadWeights, match=message):
        await updater(engine, tmp_path).from_stream(chunks(data), None)
    assert engine.policy_version == 0 and engine.swapped == []


async def test_a_layer_outside_the_declared_targets_or_a_rank_above_the_servers_is_refused(
    tmp_path,
) -> None:
    engine = adapter_engine(max_lora_rank=8)
    narrow = AdapterShape(rank=2, alpha=4, target_modules=("q_proj",))
    with pytest.raises(BadWeights, match="outside"):
        await updater(engine, tmp_path).from_stream(chunks(upload(adapter_tensors(), narrow)), None)
    wide = AdapterShape(rank=16, alpha=32, target_modules=("q_proj", "down_proj"))
    with pytest.raises(BadWeights, match="max_rank 8"):
        await updater(engine, tmp_path).from_stream(chunks(upload(adapter_tensors(16), wide)), None)
    bad_meta = save(adapter_tensors(), metadata={ADAPTER_METADATA: '{"rank": 0}'})
    with pytest.raises(BadWeights, match="not an adapter's shape"):
        await updater(engine, tmp_path).from_stream(chunks(bad_meta), None)
    assert engine.swapped == []


async def test_a_non_finite_adapter_is_refused_before_it_serves(tmp_path) -> None:
    engine = adapter_engine()
    tensors = adapter_tensors()
    tensors[f"{PREFIX}.self_attn.q_proj.lora_B.weight"][0, 0] = float("nan")
    with pytest.raises(BadWeights, match=r"q_proj\.lora_B"):
        await updater(engine, tmp_path).from_stream(chunks(upload(tensors)), None)
    assert engine.policy_version == 0 and engine.swapped == []


async def test_each_kind_sent_to_a_server_set_up_for_the_other_says_what_to_change(
    tmp_path,
) -> None:
    whole = save({name: torch.zeros(spec.shape) for name, spec in MANIFEST.items()})
    with pytest.raises(NotEnabled, match=r"engine\.lora"):
        await updater(adapter_engine(), tmp_path).from_stream(chunks(whole), None)
    plain = adapter_engine(max_lora_rank=None)
    with pytest.raises(NotEnabled, match="ROLLGYM_ENGINE__LORA__MAX_RANK"):
        await updater(plain, tmp_path).from_stream(chunks(upload(adapter_tensors())), None)
    await updater(plain, tmp_path).from_stream(chunks(whole), None)  # its own kind goes
    assert [type(w) for w in plain.swapped] == [StagedWeights]


async def test_a_peft_checkpoint_directory_is_taken_by_path(tmp_path) -> None:
    checkpoint = tmp_path / "checkpoint-3"
    checkpoint.mkdir()
    (checkpoint / ADAPTER_FILE).write_bytes(save(adapter_tensors()))
    peft_config = {"r": 2, "lora_alpha": 4, "target_modules": ["down_proj", "q_proj"]}
    (checkpoint / ADAPTER_CONFIG).write_text(json.dumps({**peft_config, "use_dora": False}))
    engine = adapter_engine()
    await updater(engine, tmp_path).from_path(checkpoint, expected_version=0)
    assert engine.policy_version == 1 and isinstance(engine.swapped[0], AdapterWeights)
    assert (checkpoint / ADAPTER_FILE).exists()  # the trainer's checkpoint is left alone
    (checkpoint / ADAPTER_CONFIG).write_text(json.dumps({**peft_config, "use_dora": True}))
    with pytest.raises(BadWeights, match="only plain LoRA"):
        shape_in_peft_config(checkpoint / ADAPTER_CONFIG)


def test_a_restart_set_up_for_the_other_kind_is_refused_with_the_way_out(tmp_path) -> None:
    import asyncio

    engine = adapter_engine()
    asyncio.run(updater(engine, tmp_path).from_stream(chunks(upload(adapter_tensors())), None))
    plain = adapter_engine(max_lora_rank=None)
    with pytest.raises(Exception, match="is a LoRA adapter") as raised:
        asyncio.run(
            restore_policy(plain, PolicyStore(tmp_path / "policy"), tmp_path / "staging", {})
        )
    assert "remove" in str(raised.value) and plain.swapped == []


def test_check_adapter_gives_the_adapter_served_from_its_folder(tmp_path) -> None:
    path = tmp_path / ADAPTER_FILE
    path.write_bytes(save(adapter_tensors()))
    checked = check_adapter(path, SHAPE, MANIFEST, max_rank=8)
    assert checked == AdapterWeights(tmp_path, rank=2, nbytes=path.stat().st_size)


def test_the_server_setting_takes_vllms_rank_sizes_only(default_model_dir) -> None:
    assert served_lora_rank(2) == 8 and served_lora_rank(64) == 64
    with pytest.raises(ValueError, match="up to rank 512"):
        served_lora_rank(513)
    with pytest.raises(ValueError, match="vLLM's sizes"):
        LoraServingConfig(max_rank=12)
    with pytest.raises(ValueError, match="does not combine"):
        EngineConfig(
            model_dir=default_model_dir,
            lora=LoraServingConfig(),
            speculation={"enabled": True},
        )
    for broadcast in ("nccl", "gloo"):  # a broadcast sends whole weights
        with pytest.raises(ValueError, match="does not combine"):
            EngineConfig(
                model_dir=default_model_dir, lora=LoraServingConfig(), weight_transfer=broadcast
            )
