"""``WeightUpdater``: one weight update at a time, checked before the engine is touched.

An update runs in three steps, and only the last one touches the engine:

1. **stage**: an HTTP body is streamed to a file in the staging dir (bounded size);
2. **check**: safetensors headers against the served model's manifest (names, shapes,
   dtypes, completeness); any problem is a 4xx and the old weights keep serving;
3. **swap**: the engine applies them (its in-flight policy, prefix cache reset) and the
   version goes up by one.

A second update while one runs gets ``UpdateInProgress`` (409); ``expected_version`` that
is not the current version gets ``VersionMismatch`` (409). The last applied upload is kept
until the next one succeeds: the engine reloads its last good weights if a swap fails
halfway.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import BinaryIO

from rollgym.contract.wire import WeightUpdateResult
from rollgym.server.errors import (
    NotFound,
    ServerError,
    UpdateInProgress,
    VersionMismatch,
    WeightsTooLarge,
)
from rollgym.server.metrics import ServerMetrics
from rollgym.server.weights.base import NcclWeights, StagedWeights, WeightTarget
from rollgym.server.weights.safetensors_check import check_announced, checkpoint_files, stage

_WRITE_CHUNK = 4 << 20  # buffer the body into writes of this size, each off the loop


class WeightUpdater:
    """See the module docstring."""

    def __init__(
        self,
        target: WeightTarget,
        staging_dir: Path,
        *,
        max_bytes: int,
        metrics: ServerMetrics,
        aliases: dict[str, str] | None = None,
    ):
        self._target = target
        self._staging = staging_dir
        self._max_bytes = max_bytes
        self._metrics = metrics
        self._aliases = aliases or {}
        self._lock = asyncio.Lock()
        self._last_upload: Path | None = None

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
                await self._receive(body, path)
                staged = stage([path], self._target.manifest(), aliases=self._aliases)
                result = await self._swap(staged, time.perf_counter() - started)
            if self._last_upload is not None:
                self._last_upload.unlink(missing_ok=True)
            self._last_upload = path
            return result

    async def from_path(self, path: Path, expected_version: int | None) -> WeightUpdateResult:
        """Apply safetensors file(s) at ``path`` (a file or a checkpoint directory)."""
        async with self._exclusive(expected_version):
            started = time.perf_counter()
            staged = await asyncio.to_thread(self._stage_path, path)
            return await self._swap(staged, time.perf_counter() - started)

    def _stage_path(self, path: Path) -> StagedWeights:
        if not path.exists():
            raise NotFound(f"{path} does not exist on the server")
        files = checkpoint_files(path)
        return stage(files, self._target.manifest(), aliases=self._aliases)

    async def from_nccl(
        self, weights: NcclWeights, expected_version: int | None
    ) -> WeightUpdateResult:
        """Receive a broadcast over vLLM's native NCCL transfer (GPU hosts)."""
        async with self._exclusive(expected_version):
            check_announced(weights, self._target.manifest(), self._aliases)
            return await self._swap(weights, 0.0)

    @contextlib.asynccontextmanager
    async def _exclusive(self, expected_version: int | None) -> AsyncIterator[None]:
        if self._lock.locked():
            self._metrics.weight_updates.labels(outcome="rejected").inc()
            raise UpdateInProgress("another weight update is running; retry when it is done")
        async with self._lock:
            current = self._target.policy_version
            if expected_version is not None and expected_version != current:
                self._metrics.weight_updates.labels(outcome="rejected").inc()
                raise VersionMismatch(
                    f"the server is at policy version {current}, not {expected_version}"
                )
            try:
                yield
            except ServerError as exc:
                outcome = "rejected" if exc.status < 500 else "failed"
                self._metrics.weight_updates.labels(outcome=outcome).inc()
                raise

    @contextlib.contextmanager
    def _upload_file(self) -> Iterator[Path]:
        """A fresh file in the staging dir, removed unless the update succeeds."""
        self._staging.mkdir(parents=True, exist_ok=True)
        path = self._staging / f"upload-{uuid.uuid4().hex}.safetensors"
        try:
            yield path
        except BaseException:
            path.unlink(missing_ok=True)
            raise

    async def _receive(self, body: AsyncIterator[bytes], path: Path) -> int:
        received = 0
        pending: list[bytes] = []
        pending_bytes = 0
        with path.open("wb") as f:
            async for chunk in body:
                received += len(chunk)
                if received > self._max_bytes:
                    raise WeightsTooLarge(
                        f"the body exceeds the limit of {self._max_bytes} bytes "
                        "(max_weight_bytes, ROLLGYM_MAX_WEIGHT_BYTES)"
                    )
                pending.append(chunk)
                pending_bytes += len(chunk)
                if pending_bytes >= _WRITE_CHUNK:
                    await asyncio.to_thread(f.write, b"".join(pending))
                    pending, pending_bytes = [], 0
            await asyncio.to_thread(_finish, f, b"".join(pending))
        return received

    async def _swap(
        self, weights: StagedWeights | NcclWeights, load_s: float
    ) -> WeightUpdateResult:
        started = time.perf_counter()
        version = await self._target.swap_weights(weights)
        apply_s = time.perf_counter() - started
        self._metrics.weight_sync.labels(phase="load").observe(load_s)
        self._metrics.weight_sync.labels(phase="apply").observe(apply_s)
        self._metrics.weight_updates.labels(outcome="applied").inc()
        self._metrics.policy_version.set(version)
        return WeightUpdateResult(
            policy_version=version,
            bytes=weights.nbytes,
            load_s=load_s,
            apply_s=apply_s,
            in_flight_policy=self._target.in_flight_policy,
        )


def _finish(f: BinaryIO, tail: bytes) -> None:
    f.write(tail)
    f.flush()
    os.fsync(f.fileno())
