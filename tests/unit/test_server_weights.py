"""Weight updates are checked before the engine is touched; one at a time; versioned."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import AsyncIterator

import pytest
import torch
from safetensors.torch import save
from server_fakes import safetensors_bytes, wait_for

from rollgym.engine.base import NcclWeights, StagedWeights, TensorSpec
from rollgym.engine.config import WeightCheckConfig
from rollgym.engine.errors import (
    BadWeights,
    TruncatedWeights,
    UpdateInProgress,
    VersionMismatch,
    WeightsNotFound,
    WeightsTooLarge,
)
from rollgym.engine.fake import FAKE_MANIFEST, FakeEngine
from rollgym.engine.metrics import NullMetrics
from rollgym.engine.weights import receive as receive_module
from rollgym.engine.weights import updater as updater_module
from rollgym.engine.weights.receive import receive, write_all
from rollgym.engine.weights.safetensors_check import (
    check_announced,
    l2_norm,
    non_finite,
    read_header,
    read_manifest,
    stage,
)
from rollgym.engine.weights.store import PolicyStore
from rollgym.engine.weights.updater import WeightUpdater


def write(tmp_path, data: bytes, name: str = "w.safetensors"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


async def chunks(data: bytes, size: int = 7) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def updater(engine: FakeEngine, tmp_path, **kwargs) -> WeightUpdater:
    kwargs.setdefault("max_bytes", 1 << 20)
    store = PolicyStore(tmp_path / "policy")
    return WeightUpdater(engine, tmp_path / "staging", store, metrics=NullMetrics(), **kwargs)


def test_header_gives_names_dtypes_and_shapes(tmp_path) -> None:
    path = write(
        tmp_path, save({"a": torch.zeros(2, 3), "b": torch.zeros(4, dtype=torch.bfloat16)})
    )
    tensors, _ = read_header(path)
    assert tensors == {"a": TensorSpec("F32", (2, 3)), "b": TensorSpec("BF16", (4,))}
    assert read_manifest([path], dtype="F32")["b"] == TensorSpec("F32", (4,))


@pytest.mark.parametrize("cut", [4, 20, -1])
def test_a_truncated_file_is_named_as_such(tmp_path, cut) -> None:
    data = safetensors_bytes()
    with pytest.raises(TruncatedWeights):
        read_header(write(tmp_path, data[:cut]))


def test_garbage_is_not_safetensors(tmp_path) -> None:
    with pytest.raises(BadWeights):
        read_header(write(tmp_path, b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!"))
    with pytest.raises(BadWeights, match="after the last tensor"):
        read_header(write(tmp_path, safetensors_bytes() + b"extra"))


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (safetensors_bytes(shape=(8, 5)), "wrong dtype or shape"),
        (safetensors_bytes(dtype=torch.int32), "I32"),
        (safetensors_bytes(name="model.other.weight"), "unknown tensors model.other.weight"),
        (save({"x": torch.zeros(1)}), "missing tensors model.embed_tokens.weight"),
    ],
)
def test_weights_that_do_not_fit_the_model_are_rejected(tmp_path, data, problem) -> None:
    with pytest.raises(BadWeights, match=problem):
        stage([write(tmp_path, data)], FAKE_MANIFEST)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_floating_weights_of_another_precision_fit(tmp_path, dtype) -> None:
    """A bfloat16 trainer may update a float32 server: the engine's loader casts."""
    stage([write(tmp_path, safetensors_bytes(dtype=dtype))], FAKE_MANIFEST)


def test_a_tied_lm_head_stands_for_the_embedding(tmp_path) -> None:
    aliases = {"lm_head.weight": "model.embed_tokens.weight"}
    alone = stage(
        [write(tmp_path, safetensors_bytes(name="lm_head.weight"))], FAKE_MANIFEST, aliases=aliases
    )
    assert alone.renames == {"lm_head.weight": "model.embed_tokens.weight"}
    both = save({"lm_head.weight": torch.ones(8, 4), "model.embed_tokens.weight": torch.ones(8, 4)})
    staged = stage([write(tmp_path, both, "both.safetensors")], FAKE_MANIFEST, aliases=aliases)
    assert staged.skip == {"lm_head.weight"} and not staged.renames


def test_an_nccl_announcement_is_checked_like_a_file() -> None:
    good = NcclWeights(("model.embed_tokens.weight",), ("float32",), ((8, 4),))
    check_announced(good, FAKE_MANIFEST, {})
    assert good.nbytes == 8 * 4 * 4
    check_announced(NcclWeights(good.names, ("bfloat16",), good.shapes), FAKE_MANIFEST, {})
    with pytest.raises(BadWeights, match="wrong dtype or shape"):
        check_announced(NcclWeights(good.names, ("float32",), ((4, 8),)), FAKE_MANIFEST, {})


async def test_an_upload_swaps_and_bumps_the_version(tmp_path) -> None:
    engine = FakeEngine(lambda p: [])
    weights = updater(engine, tmp_path)
    result = await weights.from_stream(chunks(safetensors_bytes()), expected_version=0)
    assert result.policy_version == engine.policy_version == 1
    assert result.bytes == len(safetensors_bytes()) and result.in_flight_policy == "finish"
    assert len(engine.swapped) == 1
    second = await weights.from_stream(chunks(safetensors_bytes()), expected_version=None)
    assert second.policy_version == 2
    # the last applied upload is kept with its version (the engine's fallback, and what a
    # restart serves); older ones (after the answer) and the staging area are cleared
    assert PolicyStore(tmp_path / "policy").load() == ([engine.swapped[-1].files[0]], 2)
    assert list((tmp_path / "staging").iterdir()) == []
    served = engine.swapped[-1].files[0].parent.name
    kept = {"state.json", served, "spare.safetensors"}  # the first upload, to write over
    await wait_for(lambda: {p.name for p in (tmp_path / "policy").iterdir()} == kept)


async def test_replaced_files_go_after_the_answer_and_before_the_next_update(
    tmp_path, monkeypatch
) -> None:
    engine = FakeEngine(lambda p: [])
    weights = updater(engine, tmp_path)
    release, retired = threading.Event(), []

    def held_retire(store: PolicyStore, folder) -> None:
        release.wait(timeout=10)
        retire(store, folder)
        retired.append(folder.name)

    retire = PolicyStore.retire
    monkeypatch.setattr(PolicyStore, "retire", held_retire)
    await weights.from_stream(chunks(safetensors_bytes()), expected_version=None)
    first = engine.swapped[-1].files[0].parent
    assert (await weights.from_stream(chunks(safetensors_bytes()), None)).policy_version == 2
    assert first.exists() and retired == []  # answered while the old files are still there
    third = asyncio.create_task(weights.from_stream(chunks(safetensors_bytes()), None))
    await asyncio.sleep(0.05)
    assert engine.policy_version == 2 and not third.done()  # waits for the removal
    release.set()
    assert (await third).policy_version == 3
    assert not first.exists() and retired[0] == first.name


async def test_the_next_upload_writes_over_the_spare_never_over_a_linked_checkpoint(
    tmp_path,
) -> None:
    engine = FakeEngine(lambda p: [])
    weights = updater(engine, tmp_path)
    checkpoint = write(tmp_path, safetensors_bytes(), "trainer.safetensors")
    await weights.from_path(checkpoint, expected_version=None)  # linked in, not copied
    for _ in range(2):
        await weights.from_stream(chunks(safetensors_bytes()), expected_version=None)
    spare = tmp_path / "policy" / "spare.safetensors"
    await wait_for(spare.exists)  # the first upload; the linked checkpoint was not kept
    assert checkpoint.stat().st_nlink == 1 and checkpoint.read_bytes() == safetensors_bytes()
    inode = spare.stat().st_ino
    shorter = safetensors_bytes(dtype=torch.bfloat16)
    await weights.from_stream(chunks(shorter), expected_version=None)
    served = engine.swapped[-1].files[0]
    assert served.stat().st_ino == inode and served.read_bytes() == shorter  # written over


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (safetensors_bytes()[:-3], TruncatedWeights),
        (safetensors_bytes(shape=(4, 4)), BadWeights),
    ],
)
async def test_a_bad_upload_never_reaches_the_engine(tmp_path, data, error) -> None:
    engine = FakeEngine(lambda p: [])
    with pytest.raises(error):
        await updater(engine, tmp_path).from_stream(chunks(data), expected_version=None)
    assert engine.swapped == [] and engine.policy_version == 0
    assert list((tmp_path / "staging").iterdir()) == []


async def test_an_oversized_upload_is_refused(tmp_path) -> None:
    engine = FakeEngine(lambda p: [])
    with pytest.raises(WeightsTooLarge):
        await updater(engine, tmp_path, max_bytes=64).from_stream(
            chunks(safetensors_bytes()), expected_version=None
        )
    assert engine.policy_version == 0


async def test_the_expected_version_guards_against_races(tmp_path) -> None:
    engine = FakeEngine(lambda p: [])
    weights = updater(engine, tmp_path)
    with pytest.raises(VersionMismatch, match="at policy version 0, not 3"):
        await weights.from_stream(chunks(safetensors_bytes()), expected_version=3)
    assert engine.swapped == []


async def test_a_second_update_while_one_runs_is_refused(tmp_path) -> None:
    engine = FakeEngine(lambda p: [])
    weights = updater(engine, tmp_path)
    release = asyncio.Event()

    async def slow_body() -> AsyncIterator[bytes]:
        await release.wait()
        yield safetensors_bytes()

    first = asyncio.create_task(weights.from_stream(slow_body(), expected_version=0))
    await asyncio.sleep(0.01)
    assert weights.updating
    with pytest.raises(UpdateInProgress):
        await weights.from_stream(chunks(safetensors_bytes()), expected_version=0)
    release.set()
    assert (await first).policy_version == 1


async def test_weights_from_a_path(tmp_path) -> None:
    engine = FakeEngine(lambda p: [])
    weights = updater(engine, tmp_path)
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    write(checkpoint, safetensors_bytes(), "model.safetensors")
    assert (await weights.from_path(checkpoint, expected_version=0)).policy_version == 1
    with pytest.raises(WeightsNotFound):
        await weights.from_path(tmp_path / "nowhere", expected_version=None)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
async def test_non_finite_weights_are_refused_naming_the_tensor(tmp_path, value) -> None:
    engine = FakeEngine(lambda p: [])
    tensor = torch.ones(8, 4)
    tensor[3, 1] = value
    data = save({"model.embed_tokens.weight": tensor})
    with pytest.raises(BadWeights, match=r"model\.embed_tokens\.weight holds 1 non-finite"):
        await updater(engine, tmp_path).from_stream(chunks(data), expected_version=None)
    assert engine.swapped == [] and engine.policy_version == 0


class LoadingEngine(FakeEngine):
    """Records whether the value check was still running when the swap (the load) began."""

    checking_at_load: list[bool]

    async def swap_weights(self, weights, ready=None):  # type: ignore[no-untyped-def]
        self.checking_at_load.append(isinstance(ready, asyncio.Future) and not ready.done())
        return await super().swap_weights(weights, ready)


@pytest.mark.parametrize("value", [1.0, math.nan])
async def test_values_are_checked_while_the_engine_loads_and_gate_the_swap(
    tmp_path, monkeypatch, value
) -> None:
    engine = LoadingEngine(lambda p: [])
    engine.checking_at_load = []
    slow_check = updater_module.check_values

    def check_values(*args, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(0.2)
        return slow_check(*args, **kwargs)

    monkeypatch.setattr(updater_module, "check_values", check_values)
    tensor = torch.ones(8, 4)
    tensor[0, 0] = value
    upload = updater(engine, tmp_path).from_stream(
        chunks(save({"model.embed_tokens.weight": tensor})), expected_version=None
    )
    if math.isnan(value):
        with pytest.raises(BadWeights, match="non-finite"):
            await upload
        assert engine.swapped == [] and list((tmp_path / "policy").iterdir()) == []
    else:
        assert (await upload).policy_version == 1
    assert engine.checking_at_load == [True]


async def test_a_norm_jump_past_the_factor_is_refused(tmp_path) -> None:
    engine = FakeEngine(lambda p: [])
    served = write(tmp_path, save({"model.embed_tokens.weight": torch.ones(8, 4)}), "served.st")
    weights = updater(
        engine,
        tmp_path,
        checks=WeightCheckConfig(max_norm_ratio=2.0),
        served=StagedWeights((served,), nbytes=0),
    )
    scaled = lambda k: save({"model.embed_tokens.weight": k * torch.ones(8, 4)})  # noqa: E731
    with pytest.raises(BadWeights, match="factor 2 allowed"):
        await weights.from_stream(chunks(scaled(10.0)), expected_version=None)
    assert (
        await weights.from_stream(chunks(scaled(1.5)), expected_version=None)
    ).policy_version == 1
    # the reference moved with the update: 1.5 -> 0.5 is a factor 3
    with pytest.raises(BadWeights, match="norm moves"):
        await weights.from_stream(chunks(scaled(0.5)), expected_version=None)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_values_are_counted_non_finite_exactly_whatever_their_sum(dtype) -> None:
    big = torch.full((4, 1000), torch.finfo(dtype).max / 2, dtype=dtype)
    assert non_finite(big) == 0  # every value is finite, though the sum may overflow
    big[1, 7], big[2, 9] = math.nan, -math.inf
    assert non_finite(big) == 2
    assert non_finite(torch.arange(10)) == 0  # integers are always finite


def test_a_norm_is_the_l2_norm_even_past_float32s_range() -> None:
    values = torch.tensor([3.0, 4.0])
    assert l2_norm(values) == pytest.approx(5.0)
    assert l2_norm(values * 1e30) == pytest.approx(5e30)  # its square overflows float32


async def test_an_upload_in_many_parts_arrives_whole(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(receive_module, "PART_BYTES", 10)  # a write every 10 bytes
    data = bytes(range(256)) * 3
    assert await receive(chunks(data), tmp_path / "f", max_bytes=1 << 20) == len(data)
    assert (tmp_path / "f").read_bytes() == data


async def test_an_upload_over_a_longer_file_is_cut_to_its_length(tmp_path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 100)
    assert await receive(chunks(b"new"), tmp_path / "f", max_bytes=1 << 20) == 3
    assert (tmp_path / "f").read_bytes() == b"new"


def test_a_short_write_is_carried_on(tmp_path, monkeypatch) -> None:
    import os

    writev = os.writev
    monkeypatch.setattr(os, "writev", lambda fd, views: writev(fd, [views[0][:3]]))
    with (tmp_path / "f").open("wb", buffering=0) as f:
        write_all(f.fileno(), [b"abcdefgh", b"", b"ij"])
    assert (tmp_path / "f").read_bytes() == b"abcdefghij"
