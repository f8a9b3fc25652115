"""``RolloutRunner``: the sampler. Runs a ``RolloutJob`` as GRPO groups, many at once.

One job at a time (``start`` replaces it). The loop admits new groups while the staleness
window has room (``AdmissionGate``), takes task seeds in the job's order
(``SeedSchedule``), and runs each group's ``group_size`` episodes concurrently; the engine
batches every episode's turns together. A finished group is filtered (``GroupFilter``) and
persisted to the buffer before it is counted; invalid trajectories are kept aside and
counted, never trained on. ``stop`` ends the job: running groups are cancelled and counted
as dropped, or with ``drain`` allowed to finish.

An error that means the server itself is wrong (a broken token prefix, a buffer that
cannot write) stops the job loudly: it is logged and shown in ``status().error``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import statistics
import uuid

from rollgym.contract.wire import RolloutJob, RolloutStatus, Trajectory, TrajectoryGroup
from rollgym.server.buffer import TrajectoryBuffer
from rollgym.server.config import RunnerConfig
from rollgym.server.metrics import ServerMetrics
from rollgym.server.rollout.admission import AdmissionGate
from rollgym.server.rollout.environments import EnvFactory
from rollgym.server.rollout.episode import EpisodeRunner, EpisodeSpec
from rollgym.server.rollout.filtering import GroupFilter, Verdict
from rollgym.server.rollout.ordering import SeedSchedule

logger = logging.getLogger(__name__)
_IDLE_POLL_S = 0.25  # re-check the window this often while it is full (pulls free room)


class _Counts:
    def __init__(self) -> None:
        self.completed_groups = 0
        self.dropped_zero_variance = 0
        self.dropped_too_few_valid = 0
        self.dropped_stopped = 0
        self.invalid_trajectories = 0


class RolloutRunner:
    """See the module docstring."""

    def __init__(
        self,
        episodes: EpisodeRunner,
        envs: EnvFactory,
        buffer: TrajectoryBuffer,
        metrics: ServerMetrics,
        config: RunnerConfig,
        *,
        seed: int | None = None,
    ):
        self._episodes = episodes
        self._envs = envs
        self._buffer = buffer
        self._metrics = metrics
        self._config = config
        self._rng = random.Random(seed)
        self._job: RolloutJob | None = None
        self._loop_task: asyncio.Task[None] | None = None
        self._groups: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._episodes_running = 0
        self._counts = _Counts()
        self._error: str | None = None

    # --- control --------------------------------------------------------------------------

    async def start(self, job: RolloutJob) -> RolloutStatus:
        """Run ``job`` (after stopping the current one, whose running groups are dropped)."""
        self._envs.check(job.env_id)
        await self.stop()
        self._job = job
        self._counts = _Counts()
        self._error = None
        gate = AdmissionGate(job.max_staleness, job.groups_per_batch, job.oversample)
        schedule = SeedSchedule(job.seeds, job.order, self._rng)
        keep = GroupFilter(job.group_size, job.drop_zero_variance)
        self._loop_task = asyncio.create_task(self._admit(job, gate, schedule, keep))
        return self.status()

    async def stop(self, *, drain: bool = False) -> RolloutStatus:
        """Stop admitting; cancel running groups (counted as dropped) unless ``drain``."""
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
            self._loop_task = None
        groups = list(self._groups)
        if drain:
            await asyncio.gather(*groups, return_exceptions=True)
        else:
            for task in groups:
                task.cancel()
            await asyncio.gather(*groups, return_exceptions=True)
        return self.status()

    def status(self) -> RolloutStatus:
        c = self._counts
        running = self._loop_task is not None and not self._loop_task.done()
        return RolloutStatus(
            running=running,
            job=self._job,
            in_flight=self._episodes_running,
            buffered_groups=self._buffer.depth.total,
            completed_groups=c.completed_groups,
            dropped_zero_variance=c.dropped_zero_variance,
            invalid_trajectories=c.invalid_trajectories,
            dropped_too_few_valid=c.dropped_too_few_valid,
            dropped_stopped=c.dropped_stopped,
            error=self._error,
        )

    # --- the loop -------------------------------------------------------------------------

    async def _admit(
        self, job: RolloutJob, gate: AdmissionGate, schedule: SeedSchedule, keep: GroupFilter
    ) -> None:
        max_groups = max(self._config.max_concurrent_episodes // job.group_size, 1)
        while self._error is None:
            in_flight = len(self._groups)
            room = min(gate.room(in_flight, self._buffer.depth.total), max_groups - in_flight)
            for _ in range(room):
                seed = schedule.next()
                task = asyncio.create_task(self._group(job, seed, schedule, keep))
                self._groups.add(task)
                task.add_done_callback(self._group_done)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_IDLE_POLL_S):  # not wait_for: it can eat a cancel
                    await self._wake.wait()

    def _group_done(self, task: asyncio.Task[None]) -> None:
        self._groups.discard(task)
        self._wake.set()
        if task.cancelled():
            return
        error = task.exception()
        if error is not None and self._error is None:
            self._error = f"{type(error).__name__}: {error}"
            logger.error("rollout job stopped: %s", self._error, exc_info=error)
            if self._loop_task is not None:
                self._loop_task.cancel()

    async def _group(
        self, job: RolloutJob, seed: int, schedule: SeedSchedule, keep: GroupFilter
    ) -> None:
        """Roll out one group; once its episodes are done, persisting it is not cancelled."""
        spec = EpisodeSpec(
            env_id=job.env_id,
            env_kwargs=dict(job.env_kwargs),
            task_seed=seed,
            group_id=uuid.uuid4().hex,
            sampling=job.sampling,
            max_turns=job.max_turns,
        )
        try:
            trajectories = await asyncio.gather(
                *(self._episode(spec) for _ in range(job.group_size))
            )
        except asyncio.CancelledError:
            self._counts.dropped_stopped += 1
            raise
        if trajectories:
            schedule.observe(seed, statistics.fmean(len(t.completion_ids) for t in trajectories))
        persisting = asyncio.ensure_future(self._keep(job, spec, trajectories, keep))
        try:
            await asyncio.shield(persisting)
        except asyncio.CancelledError:
            await persisting  # a finished group is persisted and counted, then we stop
            raise

    async def _keep(
        self, job: RolloutJob, spec: EpisodeSpec, trajectories: list[Trajectory], keep: GroupFilter
    ) -> None:
        valid, invalid = keep.split(trajectories)
        for trajectory in invalid:
            await self._buffer.put_invalid(trajectory)
            self._counts.invalid_trajectories += 1
            self._metrics.invalid.inc()
        verdict = keep.verdict([t.reward for t in valid])
        if verdict is Verdict.KEEP:
            group = TrajectoryGroup(
                group_id=spec.group_id,
                env_id=job.env_id,
                task_seed=spec.task_seed,
                trajectories=valid,
            )
            if await self._buffer.put_group(group):  # durable before it counts
                self._counts.completed_groups += 1
                self._metrics.trajectories.labels(source="rollout").inc(len(valid))
            return
        self._metrics.dropped.labels(reason=verdict.value).inc(len(valid))
        if verdict is Verdict.ZERO_VARIANCE:
            self._counts.dropped_zero_variance += 1
        else:
            self._counts.dropped_too_few_valid += 1

    async def _episode(self, spec: EpisodeSpec) -> Trajectory:
        self._episodes_running += 1
        self._metrics.inflight.inc()
        try:
            return await self._episodes.run(spec)
        finally:
            self._episodes_running -= 1
            self._metrics.inflight.dec()

    async def close(self) -> None:
        await self.stop()
