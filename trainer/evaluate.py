"""Success rate of a policy on held-out task seeds, measured through the rollout server.

The policy's weights are pushed to the server, an evaluation job runs one episode per
held-out seed (``group_size=1``, nothing filtered), and the episodes sampled from exactly
those weights are pulled (``max_staleness=0``) and acked. The rate comes with a Wilson
score interval, which stays inside [0, 1] and is honest for rates near 0 or 1.

Evaluation and training share the server's buffer, so stop the training job first; groups
that are not this evaluation's (other seeds, other sizes) are acked and ignored.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from pathlib import Path

from rollgym.contract.wire import PullRequest, RolloutJob, SamplingSettings, Trajectory
from rollgym.trainer.client import ServerClient
from rollgym.trainer.errors import StarvedError
from rollgym.trainer.progress import succeeded
from rollgym.trainer.weights import WeightPusher


@dataclasses.dataclass(frozen=True)
class SuccessRate:
    """``successes`` out of ``episodes``, with a 95% Wilson interval ``[low, high]``."""

    successes: int
    episodes: int
    low: float
    high: float
    mean_reward: float

    @property
    def rate(self) -> float:
        return self.successes / self.episodes if self.episodes else 0.0

    def __str__(self) -> str:
        return (
            f"{100 * self.rate:.1f}% ({self.successes}/{self.episodes}, "
            f"95% CI {100 * self.low:.1f}-{100 * self.high:.1f}%)"
        )


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a binomial rate (``z=1.96``: 95%)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def success_rate(trajectories: Sequence[Trajectory]) -> SuccessRate:
    wins = sum(succeeded(t) for t in trajectories)
    low, high = wilson_interval(wins, len(trajectories))
    rewards = [t.reward for t in trajectories]
    return SuccessRate(wins, len(trajectories), low, high, sum(rewards) / max(len(rewards), 1))


def held_out_seeds(count: int, *, start: int = 10_000_000) -> list[int]:
    """Task seeds far from those training uses (0, 1, 2, ... and the demonstrations')."""
    return list(range(start, start + count))


def evaluate_weights(
    client: ServerClient,
    model_dir: Path,
    *,
    env_id: str,
    env_kwargs: dict[str, object],
    seeds: Sequence[int],
    max_turns: int,
    sampling: SamplingSettings,
    timeout_s: float = 900.0,
) -> SuccessRate:
    """Push ``model_dir``'s weights, play one episode per seed, return the success rate."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
    pusher = WeightPusher(client, version=client.policy_version())
    pusher.push(model)
    job = RolloutJob(
        env_id=env_id,
        env_kwargs=env_kwargs,
        group_size=1,
        groups_per_batch=len(seeds),
        max_staleness=0,
        max_turns=max_turns,
        sampling=sampling,
        seeds=list(seeds),
        drop_zero_variance=False,
    )
    client.start_rollouts(job)
    try:
        episodes = _collect(client, pusher.version, set(seeds), timeout_s)
    finally:
        client.stop_rollouts()
    return success_rate(episodes)


def _collect(
    client: ServerClient, version: int, seeds: set[int], timeout_s: float
) -> list[Trajectory]:
    """One valid episode per seed, sampled at ``version``; everything else acked away."""
    found: dict[int, Trajectory] = {}
    deadline = time.monotonic() + timeout_s
    while len(found) < len(seeds):
        if time.monotonic() > deadline:
            raise StarvedError(f"evaluation got {len(found)}/{len(seeds)} episodes in time")
        answer = client.pull(
            PullRequest(
                trainer_version=version,
                max_staleness=0,
                num_groups=len(seeds) - len(found),
                timeout_s=10.0,
            )
        )
        for group in answer.groups:
            for trajectory in group.trajectories:
                seed = trajectory.task_seed
                if seed in seeds and seed not in found and trajectory.valid:
                    found[seed] = trajectory
        client.ack([g.group_id for g in answer.groups])
    return [found[s] for s in sorted(found)]
