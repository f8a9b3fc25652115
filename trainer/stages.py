"""Where the wall time goes: the loop's four stages as busy spans on one clock.

The loop has four stages (README.md, "Architecture"): **sampling** (the engine generating), **environment**
(env steps, sandbox included), **buffer** (finished trajectories waiting for the trainer) and
**training** (the trainer computing, pushing weights, checkpointing). Each stage is *busy*
while at least one of its spans covers the moment, and *waiting* otherwise, so over a window
``busy + waiting = window`` for every stage and the four can be compared side by side: in
synchronous mode sampling waits while training runs and the other way round; asynchronous
mode overlaps them.

Server-side spans are rebuilt from each trajectory's per-turn durations: turns run one after
another (engine queue, generation, env step), and the episode ended at ``created_at``, so
walking back from there places every span. This assumes the server and trainer clocks agree
(true on one machine; off by the clock skew across machines).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Literal

from rollgym.contract.wire import Trajectory

Stage = Literal["sampling", "environment", "buffer", "training"]
STAGES: tuple[Stage, ...] = ("sampling", "environment", "buffer", "training")
Span = tuple[float, float]


def episode_spans(trajectory: Trajectory, pulled_at: float) -> dict[Stage, list[Span]]:
    """The sampling, environment and buffer spans of one episode (see the module docstring)."""
    sampling: list[Span] = []
    environment: list[Span] = []
    t = trajectory.created_at
    for turn in reversed(trajectory.turns):
        environment.append((t - turn.env_s, t))
        t -= turn.env_s
        sampling.append((t - turn.model_s, t))
        t -= turn.model_s + turn.queue_s
    buffer = [(trajectory.created_at, max(trajectory.created_at, pulled_at))]
    return {"sampling": sampling, "environment": environment, "buffer": buffer, "training": []}


def covered(spans: Iterable[Span], start: float, end: float) -> float:
    """Length of the union of ``spans`` clipped to ``[start, end]``."""
    clipped = sorted((max(a, start), min(b, end)) for a, b in spans if b > start and a < end)
    total, reach = 0.0, start
    for a, b in clipped:
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


@dataclasses.dataclass(frozen=True)
class StageShare:
    """One stage over a window: seconds busy and waiting (they sum to the window)."""

    busy_s: float
    waiting_s: float

    @property
    def busy_share(self) -> float:
        total = self.busy_s + self.waiting_s
        return self.busy_s / total if total > 0 else 0.0


class StageTimeline:
    """Collects busy spans per stage and reports shares over any window."""

    def __init__(self) -> None:
        self.spans: dict[Stage, list[Span]] = {stage: [] for stage in STAGES}

    def add(self, stage: Stage, start: float, end: float) -> None:
        if end > start:
            self.spans[stage].append((start, end))

    def add_episode(self, trajectory: Trajectory, pulled_at: float) -> None:
        for stage, spans in episode_spans(trajectory, pulled_at).items():
            for start, end in spans:
                self.add(stage, start, end)

    def shares(self, start: float, end: float) -> dict[Stage, StageShare]:
        """Busy and waiting seconds of every stage over ``[start, end]``."""
        window = max(0.0, end - start)
        result = {}
        for stage in STAGES:
            busy = covered(self.spans[stage], start, end)
            result[stage] = StageShare(busy_s=busy, waiting_s=window - busy)
        return result
