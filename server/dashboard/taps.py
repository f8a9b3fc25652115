"""Where the dashboard listens to the buffer (every store and pull): a ``TrajectoryBuffer``
that adds nothing but calls to the recorder. Generations reach the recorder through
``server.observability.observed.ObservedEngine``.

    buffer = ObservedBuffer(path, config, recorder=recorder)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from rollgym.contract.wire import PullRequest, PullResponse, Trajectory, TrajectoryGroup
from rollgym.server.buffer.store import Leased, TrajectoryBuffer
from rollgym.server.config import BufferConfig
from rollgym.server.dashboard.recorder import DashboardRecorder


class ObservedBuffer(TrajectoryBuffer):
    """A ``TrajectoryBuffer`` that tells the recorder what it stored and what was pulled."""

    def __init__(
        self,
        path: Path,
        config: BufferConfig,
        *,
        recorder: DashboardRecorder,
        listeners: Sequence[Callable[[TrajectoryGroup], None]] = (),
    ):
        super().__init__(path, config)
        self._recorder = recorder
        self._listeners = listeners  # more taps on stored groups (the cost board's)

    async def put_group(self, group: TrajectoryGroup) -> bool:
        stored = await super().put_group(group)
        if stored:
            self._recorder.group_stored(group)
            for listen in self._listeners:
                listen(group)
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
