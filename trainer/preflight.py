"""What a trainer should know before it joins a server that is already running.

``rollgym train`` meets a server in whatever state it is: sampling for a rollout job, or
holding groups that external agents played and no job at all. Three traps wait there, and
``plan_start`` turns each into a decision or a line that says what will happen and what to
do, before any step:

1. **A push that ages the buffer.** A fresh trainer pushes its starting weights so the
   server samples from exactly them; that bumps the version, and every group already
   buffered is one version old at the first pull. If the server never took an update
   (version 0) and serves a model of ``--model``'s name, it already serves the starting
   weights: nothing is pushed.
2. **Groups that go stale.** Without a rollout job nothing new arrives at the trainer's
   version: buffered groups sampled at version ``v`` stay trainable while
   ``trainer_version - v <= max_staleness`` (``rollgym.contract.staleness``), so only the
   first ``max_staleness + 1`` steps (one fewer after a push) can use them.
3. **A batch that cannot fill.** Without a rollout job, a batch bigger than the buffer
   waits ``stall_timeout_s`` for agents to play the rest.

And a run that is already over: ``--output-dir`` holding a checkpoint at ``total_steps``
would resume, train nothing and look successful; that is refused.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from rollgym.contract.wire import PolicyInfo, RolloutStatus
from rollgym.trainer.config import TrainerConfig


@dataclasses.dataclass(frozen=True)
class StartPlan:
    """How to start: whether to push first, what to tell the user, or why not to start."""

    push_start: bool
    notes: list[str]
    refusal: str | None = None


def plan_start(
    config: TrainerConfig,
    *,
    model: Path,
    policy: PolicyInfo,
    rollouts: RolloutStatus,
    resumed_step: int | None,
) -> StartPlan:
    """The start of a ``train`` run against ``policy``'s server (see the module docstring).

    ``resumed_step``: the step of ``config.output_dir``'s latest checkpoint, None if none.
    """
    if resumed_step is not None and resumed_step >= config.total_steps:
        return StartPlan(
            push_start=False,
            notes=[],
            refusal=f"{config.output_dir} holds a run already trained to step {resumed_step} "
            f"(--total-steps {config.total_steps}): give a new --output-dir, or a larger "
            "--total-steps to train on from it",
        )
    served = policy.policy_version == 0 and policy.model == model.name
    push = resumed_step is None and not served
    notes = []
    if resumed_step is None and served:
        notes.append(
            f"the server serves {policy.model} at version 0, never updated: the starting "
            "weights, so nothing is pushed first (buffered groups stay at the trainer's version)"
        )
    if rollouts.running:
        return StartPlan(push_start=push, notes=notes)
    buffered, batch = rollouts.buffered_groups, config.groups_per_batch
    if buffered < batch:
        notes.append(
            f"the server runs no rollout job and holds {buffered} complete group(s), fewer "
            f"than --groups-per-batch {batch}: each step waits up to {config.stall_timeout_s:.0f}"
            f" s for agents to play more; --groups-per-batch {max(buffered, 1)} trains on "
            "what is there"
        )
    steps_on_buffer = min(config.total_steps, buffered // batch)
    fresh_steps = config.max_staleness + 1 - int(push)
    if steps_on_buffer > fresh_steps:
        notes.append(
            f"the server runs no rollout job: its {buffered} buffered groups feed "
            f"{steps_on_buffer} steps, but each step moves the policy one version on, so "
            f"groups are stale after {fresh_steps} step(s) and dropped; --max-staleness "
            f"{steps_on_buffer - 1 + int(push)} keeps them all"
        )
    return StartPlan(push_start=push, notes=notes)
