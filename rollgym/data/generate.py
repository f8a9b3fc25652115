"""Sample episodes for data: from a model directory in-process, or from a running server.

``GenerateConfig`` says what: ``episodes`` episodes of ``env_id`` in groups of
``group_size`` (the samples of one task seed), seeds ``start_seed, start_seed + 1, ...``
(or a given list), with the sampling settings. Either way the episodes are the server's
own (``EpisodeRunner``: token-faithful, each turn's logprobs and policy version), so
generated data and training data have one format.

* ``generate_local(config, engine_config)``: a vLLM engine on ``engine_config.model_dir``
  in this process, the envs of this process's registry (no sandbox pool: a sandboxed env
  needs a server with one, below);
* ``generate_remote(config, client)``: the server's rollout runner does the sampling; this
  replaces the server's rollout job (don't point it at a server that is training) and
  pulls and acks the groups, which the server then keeps in its archive.

Either returns the groups in task-seed order with every trajectory, invalid ones too
(curation filters them).
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from rollgym.contract.wire import (
    PullRequest,
    RolloutJob,
    SamplingSettings,
    Trajectory,
    TrajectoryGroup,
)
from rollgym.data.errors import DataError

if TYPE_CHECKING:
    from rollgym.engine.config import EngineConfig
    from rollgym.trainer.client import ServerClient

# Generated data is kept whatever its version: the widest window a job takes (RolloutJob
# bounds max_staleness to 1000 versions; nothing pushes that often while generating).
_NEVER_STALE = 1000


class GenerateConfig(BaseModel):
    """What to sample (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    env_id: str
    env_kwargs: dict[str, object] = Field(default_factory=dict)
    episodes: int = Field(ge=1)
    group_size: int = Field(1, ge=1)
    start_seed: int = 0
    seeds: list[int] | None = Field(None, description="task seeds; default start_seed, +1, ...")
    sampling: SamplingSettings = Field(default_factory=SamplingSettings)
    max_turns: int | None = Field(None, ge=1)
    concurrency: int = Field(64, ge=1, description="episodes at once (in-process sampling)")

    def group_seeds(self) -> list[int]:
        """One task seed per group: the given seeds cycled, or consecutive ones."""
        groups = math.ceil(self.episodes / self.group_size)
        if self.seeds:
            return [self.seeds[i % len(self.seeds)] for i in range(groups)]
        return list(range(self.start_seed, self.start_seed + groups))


async def generate_local(
    config: GenerateConfig, engine_config: EngineConfig
) -> list[TrajectoryGroup]:
    """Sample with a vLLM engine in this process (see the module docstring)."""
    from rollgym.engine.vllm.engine import VLLMEngine
    from rollgym.server.conversation.codec import ChatCodec
    from rollgym.server.rollout.environments import RegistryEnvs, takes_pool
    from rollgym.server.rollout.episode import EpisodeRunner, EpisodeSpec

    takes_pool(config.env_id)  # NotFound for an unknown id, before the engine starts
    envs = RegistryEnvs(lambda: None)
    codec = ChatCodec.from_model_dir(engine_config.model_dir)
    slots = asyncio.Semaphore(config.concurrency)
    async with VLLMEngine(engine_config) as engine:
        runner = EpisodeRunner(engine, codec, envs, max_model_len=engine_config.max_model_len)

        async def episode(spec: EpisodeSpec) -> Trajectory:
            async with slots:
                return await runner.run(spec)

        async def group(seed: int, size: int) -> TrajectoryGroup:
            spec = EpisodeSpec.of(config, seed)
            trajectories = await asyncio.gather(*(episode(spec) for _ in range(size)))
            return TrajectoryGroup(
                group_id=spec.group_id,
                env_id=config.env_id,
                task_seed=seed,
                trajectories=list(trajectories),
            )

        seeds = config.group_seeds()
        sizes = [config.group_size] * len(seeds)
        sizes[-1] = config.episodes - config.group_size * (len(seeds) - 1)
        return list(await asyncio.gather(*(group(s, n) for s, n in zip(seeds, sizes, strict=True))))


def generate_remote(
    config: GenerateConfig, client: ServerClient, *, timeout_s: float = 3600.0
) -> list[TrajectoryGroup]:
    """Sample with a running server's rollout runner (see the module docstring).

    The server keeps only the valid episodes of a group (and a group with too few of
    them not at all), so fewer than ``episodes`` may come back; invalid ones stay in the
    server's archive (``rollgym export --include-invalid``).
    """
    seeds = config.group_seeds()
    job = RolloutJob(
        env_id=config.env_id,
        env_kwargs=dict(config.env_kwargs),
        group_size=config.group_size,
        groups_per_batch=min(len(seeds), 64),
        max_staleness=_NEVER_STALE,
        max_turns=config.max_turns,
        sampling=config.sampling,
        seeds=sorted(set(seeds)),
        drop_zero_variance=False,
    )
    wanted = {seed: seeds.count(seed) for seed in set(seeds)}
    found: list[TrajectoryGroup] = []
    deadline = time.monotonic() + timeout_s
    client.start_rollouts(job)
    try:
        while sum(wanted.values()) > 0:
            if time.monotonic() > deadline:
                raise DataError(f"the server sampled {len(found)}/{len(seeds)} groups in time")
            answer = client.pull(
                PullRequest(
                    trainer_version=client.policy_version(),
                    max_staleness=_NEVER_STALE,
                    num_groups=min(sum(wanted.values()), 256),
                    timeout_s=10.0,
                )
            )
            for group in answer.groups:
                seed = group.task_seed
                if group.env_id == config.env_id and seed is not None and wanted.get(seed, 0) > 0:
                    wanted[seed] -= 1
                    found.append(group)
            client.ack([g.group_id for g in answer.groups])
            status = client.rollouts()
            if status.error:
                raise DataError(f"the server's rollout job stopped: {status.error}")
    finally:
        client.stop_rollouts()
    return sorted(found, key=lambda g: seeds.index(g.task_seed or 0))
