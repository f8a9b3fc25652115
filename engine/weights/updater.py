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

from rollgym.contract.wire import WeightUpdateResult
from rollgym.engine import metrics as m
from rollgym.engine.base import NcclWeights, ServingEngine, StagedWeights, WeightTarget
from rollgym.engine.config import WeightCheckConfig
from rollgym.engine.durable import fsync_path
from rollgym.engine.errors import (
    BadInput,
    Conflict,
    EngineError,
    UpdateInProgress,
    VersionMismatch,
    WeightsNotFound,
)
from rollgym.engine.weights.receive import receive
from rollgym.engine.weights.safetensors_check import (
    check_announced,
    check_values,
    checkpoint_files,
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
        """Apply a safetensors file streamed as ``body``."""
        async with self._exclusive(expected_version):
            started = time.perf_counter()
            with self._upload_file() as path:
                await receive(body, path, max_bytes=self._max_bytes)
                staged = await asyncio.to_thread(self._check_headers, [path])
                files = await asyncio.to_thread(self._store.adopt, [path], move=True)
            return await self._apply(staged, files, time.perf_counter() - started)

    async def from_path(self, path: Path, expected_version: int | None) -> WeightUpdateResult:
        """Apply safetensors file(s) at ``path`` (a file or a checkpoint directory)."""
        async with self._exclusive(expected_version):
            started = time.perf_counter()
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
        return stage(files, self._target.manifest(), aliases=self._aliases)

    def _check_values(self, staged: StagedWeights) -> None:
        """The values (CPU work: off the loop, while the engine loads them)."""
        ratio = self._checks.max_norm_ratio
        if ratio is not None and self._served_norms is None and self._served is not None:
            self._served_norms = tensor_norms(self._served)
        norms = check_values(staged, served_norms=self._served_norms, max_norm_ratio=ratio)
        if ratio is not None:
            self._served_norms = norms

    async def _apply(
        self, checked: StagedWeights, files: list[Path], load_s: float
    ) -> WeightUpdateResult:
        """Swap in ``files``, the store's adopted copies of the header-``checked`` ones,
        then persist them with their version. Their values are checked while the engine
        loads them (it swaps only if they pass), and their data goes to the disk
        (``fsync``) while the engine swaps, there before the store names them."""
        staged = dataclasses.replace(checked, files=tuple(files))
        durable = asyncio.ensure_future(asyncio.to_thread(_fsync_all, files))
        values = asyncio.ensure_future(asyncio.to_thread(self._check_values, staged))
        try:
            result = await self._swap(staged, load_s, ready=values)
            await durable
        except BaseException:
            self._served_norms = None  # the check may have moved them on
            await _settle(durable, values)  # their threads still hold the files
            await asyncio.to_thread(self._store.discard, files)
            raise
        replaced = await asyncio.to_thread(self._store.commit, files, result.policy_version)
        if replaced is not None:  # the answer need not wait for the old files to go
            self._retiring = asyncio.ensure_future(asyncio.to_thread(self._store.retire, replaced))
        self._served = staged
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
        weights: StagedWeights | NcclWeights,
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
    at their version (if any update was ever applied); return them."""
    await asyncio.to_thread(shutil.rmtree, staging_dir, ignore_errors=True)
    await asyncio.to_thread(store.clean)
    saved = await asyncio.to_thread(store.load)
    if saved is None:
        return None
    files, version = saved
    staged = await asyncio.to_thread(stage, files, engine.manifest(), aliases=aliases)
    await engine.restore(staged, version)
    logger.info("restored policy version %d from %s", version, files[0].parent)
    return staged


async def _settle(*futures: asyncio.Future[None]) -> None:
    """Wait for ``futures`` to end, their errors retrieved, not raised: the caller raises
    its own."""
    await asyncio.wait(futures)
    for future in futures:
        if not future.cancelled():
            future.exception()


def _fsync_all(files: list[Path]) -> None:
    for path in files:
        fsync_path(path)
