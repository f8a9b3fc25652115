"""Where the dashboard listens: the policy (every generation) and the buffer (every store
and pull). Both wrap the real object and add nothing but a call to the recorder.

    policy = StageTap(MeteredEngine(engine, metrics), recorder)
    buffer = ObservedBuffer(path, config, recorder=recorder)   # a TrajectoryBuffer
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from server.buffer import Leased, TrajectoryBuffer
from server.config import BufferConfig
from server.dashboard.recorder import DashboardRecorder
from server.policy import Generation, PolicyEngine
from server.wire import PullRequest, PullResponse, SamplingSettings, Trajectory, TrajectoryGroup


class StageTap:
    """A ``PolicyEngine`` that reports each generation's engine time as a sampling span."""

    def __init__(self, engine: PolicyEngine, recorder: DashboardRecorder):
        self._engine = engine
        self._recorder = recorder

    @property
    def policy_version(self) -> int:
        return self._engine.policy_version

    async def generate(
        self,
        prompt_ids: Sequence[int],
        sampling: SamplingSettings,
        *,
        stop_token_ids: Sequence[int] = (),
        request_id: str | None = None,
    ) -> Generation:
        generation = await self._engine.generate(
            prompt_ids, sampling, stop_token_ids=stop_token_ids, request_id=request_id
        )
        self._recorder.generation(generation.model_s)
        return generation


class ObservedBuffer(TrajectoryBuffer):
    """A ``TrajectoryBuffer`` that tells the recorder what it stored and what was pulled."""

    def __init__(self, path: Path, config: BufferConfig, *, recorder: DashboardRecorder):
        super().__init__(path, config)
        self._recorder = recorder

    async def put_group(self, group: TrajectoryGroup) -> bool:
        stored = await super().put_group(group)
        if stored:
            self._recorder.group_stored(group)
        return stored

    async def put_invalid(self, trajectory: Trajectory) -> None:
        await super().put_invalid(trajectory)
        self._recorder.stored([trajectory])

    async def pull(
        self,
        request: PullRequest,
        policy_version: int,
        *,
        abandoned: Callable[[], Awaitable[bool]] | None = None,
    ) -> tuple[PullResponse, Leased]:
        response, leased = await super().pull(request, policy_version, abandoned=abandoned)
        self._recorder.pulled(leased.groups, request.trainer_version, request.max_staleness)
        return response, leased
