"""Evaluation episodes, apart from the rollout job: ``POST /admin/evaluations``.

``evaluate`` plays ``samples`` episodes on each requested seed with the policy the server
serves now, while any rollout job runs on, and answers them all, one group per seed: no
group is filtered, nothing goes to the buffer (evaluation seeds are never trained on), and
an episode that failed for reasons of the infrastructure stays in its group, marked
invalid, for the caller to count. The episodes share the runner's limit of concurrent
episodes (``runner.max_concurrent_episodes``) through their own semaphore of that size.
"""

from __future__ import annotations

import asyncio

from rollgym.contract.wire import (
    EvaluationRequest,
    EvaluationResult,
    Trajectory,
    TrajectoryGroup,
)
from rollgym.server.errors import BadRequest
from rollgym.server.rollout.episode import EpisodeRunner, EpisodeSpec


async def evaluate(
    episodes: EpisodeRunner, request: EvaluationRequest, *, version: int, max_concurrent: int
) -> EvaluationResult:
    """See the module docstring (``version``: the policy version served now); a request
    whose episodes cannot fit the context is a 4xx."""
    budget = await episodes.probe(EpisodeSpec.of(request, request.seeds[0]))
    if budget.verdict == "cannot_fit":
        raise BadRequest(f"no episode of this evaluation can fit the context: {budget.explain()}")
    slots = asyncio.Semaphore(max_concurrent)

    async def one(group: EpisodeSpec) -> Trajectory:
        async with slots:
            return await episodes.run(group)

    async def group(seed: int) -> TrajectoryGroup:
        shared = EpisodeSpec.of(request, seed)
        trajectories = await asyncio.gather(*(one(shared) for _ in range(request.samples)))
        return TrajectoryGroup(
            group_id=shared.group_id,
            env_id=request.env_id,
            task_seed=seed,
            trajectories=list(trajectories),
        )

    groups = await asyncio.gather(*(group(seed) for seed in request.seeds))
    return EvaluationResult(policy_version=version, groups=list(groups))
