"""``RolloutRunner``: the sampler. Runs a ``RolloutJob`` as GRPO groups, many at once.

One job at a time (``start`` replaces it, once the new job is checked: the env is made
and reset once, with its kwargs, and the job is refused if not even one turn fits the
model's context, or warned about if long episodes may not). The job is persisted
(``job_path``) until it is stopped, and ``resume`` starts it again after a restart. The
loop admits new groups while the staleness window, shared with external-agent sessions,
has room (``SharedWindow``), takes task seeds in the job's order (``SeedSchedule``), and
runs each group's ``group_size`` episodes concurrently; the engine batches every
episode's turns together. A finished group is filtered (``GroupFilter``) and
persisted to the buffer before it is counted; invalid trajectories are kept aside and
counted, never trained on. ``stop`` ends the job: running groups are cancelled and counted
as dropped, or with ``drain`` allowed to finish.

An error that means the server itself is wrong (a broken token prefix, a buffer that
cannot write) stops the job loudly: it is logged and shown in ``status().error``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import statistics
from pathlib import Path

from pydantic import ValidationError

from rollgym.contract.wire import RolloutJob, RolloutStatus, Trajectory, TrajectoryGroup
from rollgym.engine.durable import write_atomic
from rollgym.server.buffer.store import TrajectoryBuffer
from rollgym.server.config import RunnerConfig
from rollgym.server.errors import BadRequest, ServerError
from rollgym.server.observability.metrics import ServerMetrics
from rollgym.server.rollout.admission import AdmissionGate, SharedWindow
from rollgym.server.rollout.curriculum import Curriculum, Task
from rollgym.server.rollout.episode import EpisodeRunner, EpisodeSpec
from rollgym.server.rollout.filtering import GroupFilter, Verdict
from rollgym.server.rollout.ordering import SeedSchedule

logger = logging.getLogger(__name__)
_IDLE_POLL_S = 0.25  # re-check the window this often while it is full (pulls free room)
_CURRICULUM_TRIES = 64  # seeds a curriculum may pass over for one group before taking one


class _Counts:
    def __init__(self) -> None:
        self.completed_groups = 0
        self.dropped_zero_variance = 0
        self.dropped_too_few_valid = 0
        self.dropped_stopped = 0
        self.invalid_trajectories = 0
        self.truncated_by_context = 0


class RolloutRunner:
    """See the module docstring."""

    def __init__(
        self,
        episodes: EpisodeRunner,
        buffer: TrajectoryBuffer,
        metrics: ServerMetrics,
        config: RunnerConfig,
        *,
        job_path: Path | None = None,
        seed: int | None = None,
        window: SharedWindow | None = None,
    ):
        """``window``: the budget shared with sessions (default: the runner's own)."""
        self._episodes = episodes
        self._job_path = job_path
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
        self._curriculum: Curriculum | None = None
        self._error: str | None = None
        self._warnings: list[str] = []
        self._window = window or SharedWindow(
            AdmissionGate(0, 1), buffered=lambda: buffer.depth.total
        )
        self._window.count(lambda: len(self._groups))

    # --- control --------------------------------------------------------------------------

    async def start(self, job: RolloutJob, *, resumed: bool = False) -> RolloutStatus:
        """Run ``job`` once it is checked (after stopping the current one, whose running
        groups are dropped); a job that cannot work is refused and the current one runs on.
        ``resumed``: the persisted job after a restart. The curriculum's memory comes back for
        it and for the job this server ran last sent again (a trainer that restarts from its
        checkpoint sends its job again); any other job starts it empty."""
        warnings = await self._check(job)
        await self._halt()
        continued = resumed or job == self._job
        self._job = job
        self._counts = _Counts()
        self._error = None
        self._warnings = warnings
        if self._job_path is not None:
            await asyncio.to_thread(write_atomic, self._job_path, job.model_dump_json().encode())
        self._window.job = AdmissionGate(job.max_staleness, job.groups_per_batch, job.oversample)
        schedule = SeedSchedule(job.seeds, job.order, self._rng)
        settings = job.curriculum
        self._curriculum = (
            None
            if settings is None
            else Curriculum(window=settings.window, floor=settings.floor, rng=self._rng)
        )
        await self._load_curriculum(continued)
        keep = GroupFilter(job.group_size, job.drop_zero_variance)
        self._loop_task = asyncio.create_task(self._admit(job, schedule, keep))
        self._loop_task.add_done_callback(self._stopped)
        return self.status()

    async def _check(self, job: RolloutJob) -> list[str]:
        """Refuse a job that cannot work (``ServerError``, 4xx); return its warnings."""
        if job.group_size > self._config.max_concurrent_episodes:
            raise BadRequest(
                f"group_size {job.group_size} is over the {self._config.max_concurrent_episodes} "
                "episodes the server runs at once (runner.max_concurrent_episodes)"
            )
        first_seed = job.seeds[0] if job.seeds else 0
        warnings = []
        for part in job.parts():  # every env of a mixture
            budget = await self._episodes.probe(EpisodeSpec.of(part, first_seed))
            where = f" ({part.env_id})" if job.mixture else ""
            if budget.verdict == "cannot_fit":
                raise BadRequest(
                    f"no episode of this job{where} can fit the context: {budget.explain()}"
                )
            if budget.verdict == "may_overflow":
                warning = f"episodes{where} may be cut by the context: {budget.explain()}"
                logger.warning("rollout job on %s: %s", part.env_id, warning)
                warnings.append(warning)
        return warnings

    async def resume(self) -> None:
        """Start the job a previous run of the server persisted, if there is one."""
        if self._job_path is None or not self._job_path.is_file():
            return
        try:
            job = RolloutJob.model_validate_json(self._job_path.read_bytes())
            await self.start(job, resumed=True)
        except (ValidationError, ServerError) as exc:
            logger.error("the persisted rollout job cannot resume (%s); it is dropped", exc)
            self._job_path.unlink(missing_ok=True)
            return
        logger.info("resumed the rollout job on %s", job.env_id)

    async def stop(self, *, drain: bool = False) -> RolloutStatus:
        """Stop the job for good (it will not resume after a restart); cancel running groups
        (counted as dropped) unless ``drain``."""
        if self._job_path is not None:
            self._job_path.unlink(missing_ok=True)
        self._window.job = None
        return await self._halt(drain=drain)

    async def _halt(self, *, drain: bool = False) -> RolloutStatus:
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
            truncated_by_context=c.truncated_by_context,
            error=self._error,
            warnings=self._warnings,
        )

    # --- the loop -------------------------------------------------------------------------

    async def _admit(self, job: RolloutJob, schedule: SeedSchedule, keep: GroupFilter) -> None:
        """Start groups while the window has room; a mixture's env drawn by weight per group."""
        parts = job.parts()
        weights = [part.weight for part in parts]
        max_groups = max(self._config.max_concurrent_episodes // job.group_size, 1)
        while self._error is None:
            in_flight = len(self._groups)
            room = min(self._window.room(), max_groups - in_flight)
            for _ in range(room):
                env, seed = self._next_task(weights, schedule)
                task = asyncio.create_task(self._group(parts[env], (env, seed), schedule, keep))
                self._groups.add(task)
                task.add_done_callback(self._group_done)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_IDLE_POLL_S):  # not wait_for: it can eat a cancel
                    await self._wake.wait()

    @property
    def _curriculum_path(self) -> Path | None:
        return None if self._job_path is None else self._job_path.with_name("curriculum.json")

    async def _load_curriculum(self, continued: bool) -> None:
        """A continued job's curriculum memory back; a new job's starts empty."""
        path = self._curriculum_path
        if path is None:
            return
        if continued and self._curriculum is not None and path.is_file():
            self._curriculum.restore(json.loads(await asyncio.to_thread(path.read_bytes)))
        elif not continued:
            path.unlink(missing_ok=True)

    async def _save_curriculum(self) -> None:
        if self._curriculum is not None and (path := self._curriculum_path) is not None:
            state = json.dumps(self._curriculum.state()).encode()
            await asyncio.to_thread(write_atomic, path, state)

    def _next_task(self, weights: list[float], schedule: SeedSchedule) -> Task:
        """An env of the mixture drawn by weight and the schedule's next seed, redrawn
        together while the curriculum holds the task back (taken anyway after a pass of
        refusals): an env whose every task is held back is played less, not just its seeds."""
        for _ in range(_CURRICULUM_TRIES):
            env = 0 if len(weights) == 1 else self._rng.choices(range(len(weights)), weights)[0]
            task = (env, schedule.next())
            if self._curriculum is None or self._curriculum.admits(task):
                break
        return task

    def _stopped(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and (error := task.exception()) is not None:
            self._error = self._error or f"{type(error).__name__}: {error}"
            logger.error("the rollout loop failed: %s", self._error, exc_info=error)

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
        self, job: RolloutJob, task: Task, schedule: SeedSchedule, keep: GroupFilter
    ) -> None:
        """Roll out one group of ``task`` (``job``: its env's part of the job); once its
        episodes are done, persisting it is not cancelled."""
        env, seed = task
        spec = EpisodeSpec.of(job, seed)
        try:
            trajectories = await asyncio.gather(
                *(self._episode(spec) for _ in range(job.group_size))
            )
        except asyncio.CancelledError:
            self._counts.dropped_stopped += 1
            raise
        if trajectories:
            schedule.observe(seed, statistics.fmean(len(t.completion_ids) for t in trajectories))
        persisting = asyncio.ensure_future(self._keep(job, env, spec, trajectories, keep))
        try:
            await asyncio.shield(persisting)
        except asyncio.CancelledError:
            await persisting  # a finished group is persisted and counted, then we stop
            raise

    async def _keep(
        self,
        job: RolloutJob,
        env: int,
        spec: EpisodeSpec,
        trajectories: list[Trajectory],
        keep: GroupFilter,
    ) -> None:
        if cut := sum(t.truncated_by_context for t in trajectories):
            self._counts.truncated_by_context += cut
            self._metrics.truncated_by_context.labels(source="rollout").inc(cut)
        valid, invalid = keep.split(trajectories)
        for trajectory in invalid:
            await self._buffer.put_invalid(trajectory)
            self._counts.invalid_trajectories += 1
            self._metrics.invalid.inc()
        verdict = keep.verdict([t.reward for t in valid])
        if self._curriculum is not None and spec.task_seed is not None and len(valid) >= 2:
            self._curriculum.observe(
                (env, spec.task_seed), flat=keep.flat([t.reward for t in valid])
            )
            await self._save_curriculum()
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
        """Shut down: running groups are dropped; the job stays persisted, to resume."""
        await self._halt()
