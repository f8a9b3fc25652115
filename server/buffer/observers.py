"""Who watches the buffer: one list of observers, told of every store, set-aside and pull.

Nothing subclasses the buffer and no route reports for it: the app hands the buffer its
observers (the metrics, the dashboard's recorder, the cost board), as ``ObservedEngine``
hands every generation to its observers. An observer overrides the calls it needs; each
runs on the event loop, so it must be cheap.

    buffer = TrajectoryBuffer(path, config, observers=[metrics, recorder, cost])
"""

from __future__ import annotations

from collections.abc import Sequence

from rollgym.contract.wire import PullRequest, PullResponse, Trajectory, TrajectoryGroup


class BufferObserver:
    """Told of what the buffer did; every call does nothing unless overridden."""

    def stored(self, group: TrajectoryGroup) -> None:
        """A new group was persisted (a retried put of a stored id is not new)."""

    def set_aside(self, trajectory: Trajectory) -> None:
        """An invalid trajectory was kept for inspection (never handed to a trainer)."""

    def pulled(
        self, request: PullRequest, response: PullResponse, waited_s: Sequence[float]
    ) -> None:
        """A pull answered: ``response.groups`` are leased (each ``waited_s`` in the buffer),
        ``response.dropped_stale`` trajectories were dropped as too old for
        ``request.trainer_version``."""
