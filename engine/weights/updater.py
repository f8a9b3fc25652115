"""``WeightUpdater``: one weight update at a time, checked before the engine is touched.

An update runs in four steps, and only the third touches what the engine serves:

1. **receive**: an HTTP body is streamed to a file in the staging dir (``receive``:
   bounded size, no copy of the body; written over the store's spare when it has one;
   whatever a restart finds there was cut off, and is removed);
2. **check**, off the event loop: safetensors headers against the served model's manifest
   (names, shapes, dtypes, completeness, byte ranges) before the engine sees the files,
   then the values (all finite; with ``weights.max_norm_ratio``, no tensor's norm moved
   by more than that factor) while the engine loads them beside the served weights; any
   problem is a 4xx that names it, nothing is swapped, and the old weights keep serving;
3. **swap**: the files are adopted by the ``PolicyStore`` and the engine applies them: it
   loads them while the old weights serve, then, once the values passed, pauses for the
   swap itself (its in-flight policy, prefix cache reset, a deadline) and the version
   goes up by one;
4. **persist**: once the files' data is on disk (flushed while the engine swapped), the
   store records the files and the version, so a restarted server comes back at that
   version on those weights (``restore_policy``). The files they replace are removed
   after the answer (the next update waits for that), an upload kept as the spare.

An engine started with ``engine.lora`` takes LoRA adapters instead of whole weights
(``engine.weights.adapter``): an upload whose metadata declares one, or a checkpoint
directory with peft's ``adapter_config.json``, goes through the same four steps (headers
against the base model, values finite, swap, persist). Each kind sent to a server set up
for the other is refused with what to change (``NotEnabled``, 409).

A second update while one runs gets ``UpdateInProgress``; ``expected_version`` that is not
the current version gets ``VersionMismatch`` (both 409 at the server). Each update is
counted by its outcome on the metrics sink (``engine.metrics``), with the time of its two
phases.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Iterator
from pathlib import Path

from rollgym.contract.adapter import ADAPTER_CONFIG, ADAPTER_FILE, AdapterShape
from rollgym.contract.wire import WeightUpdateResult
from rollgym.engine import metrics as m
from rollgym.engine.base import (
    AdapterWeights,
    NcclWeights,
    ServingEngine,
    StagedWeights,
    Weights,
    WeightTarget,
)
from rollgym.engine.config import WeightCheckConfig
from rollgym.engine.durable import fsync_path
from rollgym.engine.errors import (
    BadInput,
    Conflict,
    EngineError,
    NotEnabled,
    UpdateInProgress,
    VersionMismatch,
    WeightsNotFound,
)
from rollgym.engine.weights.adapter import (
    check_adapter,
    shape_declared,
    shape_in_peft_config,
    write_adapter_config,
)
from rollgym.engine.weights.receive import receive
from rollgym.engine.weights.safetensors_check import (
    check_announced,
    check_values,
    checkpoint_files,
    read_metadata,
    stage,
    tensor_norms,
)
from rollgym.engine.weights.store import PolicyStore

logger = logging.getLogger(__name__)


class WeightUpdater:
    """See the module docstring. ``served`` are the files the engine serves now."""

    def __init__(
        self,
        target: WeightTarget,
        staging_dir: Path,
        store: PolicyStore,
        *,
        max_bytes: int,
        metrics: m.MetricsSink,
        checks: WeightCheckConfig | None = None,
        aliases: dict[str, str] | None = None,
        served: StagedWeights | None = None,
    ):
        self._target = target
        self._staging = staging_dir
        self._store = store
        self._max_bytes = max_bytes
        self._metrics = metrics
        self._checks = checks or WeightCheckConfig()
        self._aliases = aliases or {}
        self._served = served
        self._served_norms: dict[str, float] | None = None
        self._lock = asyncio.Lock()
        self._retiring: asyncio.Future[None] | None = None  # removing replaced files

    @property
    def updating(self) -> bool:
        return self._lock.locked()

    async def from_stream(
        self, body: AsyncIterator[bytes], expected_version: int | None
    ) -> WeightUpdateResult:
        """Apply a safetensors file streamed as ``body`` (whole weights, or an adapter)."""
        async with self._exclusive(expected_version):
            started = time.perf_counter()
            with self._upload_file() as path:
                await receive(body, path, max_bytes=self._max_bytes)
                shape = await asyncio.to_thread(_declared_adapter, path)
                if shape is not None:
                    adapter, files = await asyncio.to_thread(
                        self._adopted_adapter, path, shape, move=True
                    )
                    return await self._apply(adapter, files, time.perf_counter() - started)
                staged = await asyncio.to_thread(self._check_headers, [path])
                files = await asyncio.to_thread(self._store.adopt, [path], move=True)
            return await self._apply(staged, files, time.perf_counter() - started)

    async def from_path(self, path: Path, expected_version: int | None) -> WeightUpdateResult:
        """Apply safetensors file(s) at ``path`` (a file or a checkpoint directory), or the
        adapter in a peft checkpoint directory."""
        async with self._exclusive(expected_version):
            started = time.perf_counter()
            if (path / ADAPTER_CONFIG).is_file():
                shape = await asyncio.to_thread(shape_in_peft_config, path / ADAPTER_CONFIG)
                adapter, files = await asyncio.to_thread(
                    self._adopted_adapter, path / ADAPTER_FILE, shape, move=False
                )
                return await self._apply(adapter, files, time.perf_counter() - started)
            staged = await asyncio.to_thread(self._checked_path, path)
            files = await asyncio.to_thread(self._store.adopt, staged.files, move=False)
            return await self._apply(staged, files, time.perf_counter() - started)

    async def from_nccl(
        self, weights: NcclWeights, expected_version: int | None
    ) -> WeightUpdateResult:
        """Receive a broadcast over vLLM's native NCCL transfer (GPU hosts; not persisted)."""
        async with self._exclusive(expected_version):
            check_announced(weights, self._target.manifest(), self._aliases)
            return await self._swap(weights, 0.0)

    def _checked_path(self, path: Path) -> StagedWeights:
        try:
            if not path.exists():
                raise WeightsNotFound(f"{path} does not exist on the server")
            files = checkpoint_files(path)
        except OSError as exc:  # a name too long, a folder we may not read...
            raise BadInput(f"{path} cannot be read: {exc.strerror or exc}") from None
        return self._check_headers(files)

    def _check_headers(self, files: list[Path]) -> StagedWeights:
        """The files' headers against the manifest (file work: off the loop)."""
        if self._target.max_lora_rank is not None:
            raise NotEnabled(
                "this server serves LoRA adapters on its base model (engine.lora): send an "
                "adapter (trainer.lora.serve='adapter'), or start it without engine.lora"
            )
        return stage(files, self._target.manifest(), aliases=self._aliases)

    def _adopted_adapter(
        self, file: Path, shape: AdapterShape, *, move: bool
    ) -> tuple[AdapterWeights, list[Path]]:
        """``file``'s header checked against the base model, then placed in a candidate
        folder with the config vLLM reads (file work: off the loop)."""
        max_rank = self._target.max_lora_rank
        if max_rank is None:
            raise NotEnabled(
                "this server takes whole weights, not LoRA adapters: start it with "
                "engine.lora (ROLLGYM_ENGINE__LORA__MAX_RANK=16), or push merged weights "
                "(trainer.lora.serve='merged')"
            )
        checked = check_adapter(file, shape, self._target.manifest(), max_rank=max_rank)
        placed = self._store.adopt([file], move=move, names=[ADAPTER_FILE])
        return checked, [placed[0], write_adapter_config(placed[0].parent, shape)]

    def _check_values(self, weights: StagedWeights | AdapterWeights) -> None:
        """The values (CPU work: off the loop, while the engine loads them); an adapter's
        are checked to be finite only (its norms say nothing of the served weights')."""
        if isinstance(weights, AdapterWeights):
            check_values(_adapter_file(weights), served_norms=None, max_norm_ratio=None)
            return
        ratio = self._checks.max_norm_ratio
        if ratio is not None and self._served_norms is None and self._served is not None:
            self._served_norms = tensor_norms(self._served)
        norms = check_values(weights, served_norms=self._served_norms, max_norm_ratio=ratio)
        if ratio is not None:
            self._served_norms = norms

    async def _apply(
        self, checked: StagedWeights | AdapterWeights, files: list[Path], load_s: float
    ) -> WeightUpdateResult:
        """Swap in ``files``, the store's adopted copies of the header-``checked`` weights,
        then persist them with their version. Their values are checked while the engine
        loads them (it swaps only if they pass), and their data goes to the disk
        (``fsync``) while the engine swaps, there before the store names them."""
        weights = _adopted(checked, files)
        durable = asyncio.ensure_future(asyncio.to_thread(_fsync_all, files))
        values = asyncio.ensure_future(asyncio.to_thread(self._check_values, weights))
        try:
            result = await self._swap(weights, load_s, ready=values)
            await durable
        except BaseException:
            self._served_norms = None  # the check may have moved them on
            await _settle(durable, values)  # their threads still hold the files
            await asyncio.to_thread(self._store.discard, files)
            raise
        replaced = await asyncio.to_thread(self._store.commit, files, result.policy_version)
        if replaced is not None:  # the answer need not wait for the old files to go
            self._retiring = asyncio.ensure_future(asyncio.to_thread(self._store.retire, replaced))
        if isinstance(weights, StagedWeights):
            self._served = weights
        return result

    @contextlib.asynccontextmanager
    async def _exclusive(self, expected_version: int | None) -> AsyncIterator[None]:
        if self._lock.locked():
            self._count("rejected")
            raise UpdateInProgress("another weight update is running; retry when it is done")
        async with self._lock:
            if self._retiring is not None:  # the files the last update replaced go first
                await self._retiring
            current = self._target.policy_version
            if expected_version is not None and expected_version != current:
                self._count("rejected")
                raise VersionMismatch(
                    f"the server is at policy version {current}, not {expected_version}"
                )
            try:
                yield
            except EngineError as exc:
                self._count("rejected" if isinstance(exc, BadInput | Conflict) else "failed")
                raise

    def _count(self, outcome: str) -> None:
        self._metrics.increment(m.WEIGHT_UPDATES, {"outcome": outcome})

    @contextlib.contextmanager
    def _upload_file(self) -> Iterator[Path]:
        """A file in the staging dir (the store's spare, or a new one), removed unless it
        was adopted."""
        self._staging.mkdir(parents=True, exist_ok=True)
        path = self._staging / f"upload-{uuid.uuid4().hex}.safetensors"
        self._store.take_spare(path)
        try:
            yield path
        finally:
            path.unlink(missing_ok=True)

    async def _swap(
        self,
        weights: Weights,
        load_s: float,
        ready: Awaitable[object] | None = None,
    ) -> WeightUpdateResult:
        swap = await self._target.swap_weights(weights, ready)
        load_s += swap.load_s
        self._metrics.observe(m.WEIGHT_SYNC, load_s, {"phase": "load"})
        self._metrics.observe(m.WEIGHT_SYNC, swap.pause_s, {"phase": "apply"})
        self._count("applied")
        return WeightUpdateResult(
            policy_version=swap.version,
            bytes=weights.nbytes,
            load_s=load_s,
            apply_s=swap.pause_s,
            in_flight_policy=self._target.in_flight_policy,
        )


async def restore_policy(
    engine: ServingEngine, store: PolicyStore, staging_dir: Path, aliases: dict[str, str]
) -> StagedWeights | None:
    """At start: drop cut-off uploads and candidates, then serve the last applied weights
    (or adapter) at their version, if any update was ever applied; return the weights
    (None for an adapter: nothing to compare whole weights' norms with)."""
    await asyncio.to_thread(shutil.rmtree, staging_dir, ignore_errors=True)
    await asyncio.to_thread(store.clean)
    saved = await asyncio.to_thread(store.load)
    if saved is None:
        return None
    files, version = saved
    folder = files[0].parent
    is_adapter = (folder / ADAPTER_CONFIG).is_file()
    if is_adapter != (engine.max_lora_rank is not None):
        kind = "a LoRA adapter" if is_adapter else "whole weights"
        raise EngineError(
            f"the last applied update (version {version}, in {folder}) is {kind}, which this "
            f"server's engine.lora setting does not serve: start it as before, or remove "
            f"{store.directory} to start from the configured model at version 0"
        )
    weights: StagedWeights | AdapterWeights
    if is_adapter:
        shape = shape_in_peft_config(folder / ADAPTER_CONFIG)
        weights = await asyncio.to_thread(
            check_adapter,
            folder / ADAPTER_FILE,
            shape,
            engine.manifest(),
            max_rank=engine.max_lora_rank or 0,
        )
    else:
        weights = await asyncio.to_thread(stage, files, engine.manifest(), aliases=aliases)
    await engine.restore(weights, version)
    logger.info("restored policy version %d from %s", version, folder)
    return weights if isinstance(weights, StagedWeights) else None


async def _settle(*futures: asyncio.Future[None]) -> None:
    """Wait for ``futures`` to end, their errors retrieved, not raised: the caller raises
    its own."""
    await asyncio.wait(futures)
    for future in futures:
        if not future.cancelled():
            future.exception()


def _adopted(
    checked: StagedWeights | AdapterWeights, files: list[Path]
) -> StagedWeights | AdapterWeights:
    """The header-``checked`` weights as the store's adopted ``files`` hold them."""
    if isinstance(checked, AdapterWeights):
        return dataclasses.replace(checked, directory=files[0].parent)
    return dataclasses.replace(checked, files=tuple(files))


def _declared_adapter(path: Path) -> AdapterShape | None:
    """The adapter an upload declares in its metadata; None: whole weights."""
    return shape_declared(read_metadata(path))


def _adapter_file(adapter: AdapterWeights) -> StagedWeights:
    """The adapter's tensors, as ``check_values`` reads files."""
    return StagedWeights(files=(adapter.directory / ADAPTER_FILE,), nbytes=adapter.nbytes)


def _fsync_all(files: list[Path]) -> None:
    for path in files:
        fsync_path(path)
