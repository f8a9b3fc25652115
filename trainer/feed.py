"""The group feed: TRL's ``rollout_func``, backed by the server's trajectory buffer.

TRL calls ``rollout_func(prompts, trainer)`` once per optimizer step with
``group_size x groups_per_batch`` placeholder prompts (the server, not a dataset, decides the
tasks). The feed long-polls ``POST /admin/buffer/pull`` at the trainer's current policy
version until it holds that many fresh groups, drops (and acks, and counts) what fails the
window checks of ``trainer.window`` (masking stale turns when the window is by turn),
records the batch in the ledger and the progress, and returns the batch in TRL's layout
(``trainer.batch``).

Pulled groups are leased; they are acked only after the step that trained them is in a
checkpoint (``trainer.callbacks.CheckpointLedgerCallback``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from rollgym.contract.wire import PullRequest, TrajectoryGroup
from rollgym.trainer.batch import build_batch
from rollgym.trainer.client import ServerClient
from rollgym.trainer.config import TrainerConfig
from rollgym.trainer.errors import StarvedError
from rollgym.trainer.ledger import DataLedger
from rollgym.trainer.progress import RunProgress
from rollgym.trainer.window import Selection, mask_stale_turns, select_groups


class GroupFeed:
    """Pulls fresh groups for each optimizer step; use an instance as TRL's ``rollout_func``."""

    def __init__(
        self,
        client: ServerClient,
        config: TrainerConfig,
        ledger: DataLedger,
        progress: RunProgress,
        version: Callable[[], int],
    ) -> None:
        """``version`` returns the policy version of the trainer's current weights."""
        self.client = client
        self.config = config
        self.ledger = ledger
        self.progress = progress
        self.version = version
        self.ready_at = time.time()  # when the last batch was handed to TRL

    def __call__(self, prompts: Sequence[object], trainer: object = None) -> dict[str, Any]:
        """TRL's hook: one batch of ``len(prompts)`` trajectories, groups adjacent."""
        size = self.config.group_size
        if len(prompts) % size:
            raise ValueError(f"TRL asked for {len(prompts)} samples, not a multiple of {size}")
        groups = self.next_groups(len(prompts) // size)
        self.ledger.record_batch(g.group_id for g in groups)
        self.progress.on_groups(groups, self.version())
        batch = build_batch(groups, size).as_rollout_output()
        self.ready_at = time.time()
        return batch

    def next_groups(self, count: int) -> list[TrajectoryGroup]:
        """Block until ``count`` fresh groups are in hand (``StarvedError`` after the stall)."""
        chosen: list[TrajectoryGroup] = []
        last_progress = time.monotonic()
        while len(chosen) < count:
            started = time.time()
            answer = self.client.pull(
                PullRequest(
                    trainer_version=self.version(),
                    max_staleness=self.config.max_staleness,
                    staleness_unit=self.config.staleness_unit,
                    num_groups=count - len(chosen),
                    timeout_s=self.config.pull_timeout_s,
                )
            )
            self.progress.on_wait(started, time.time())
            self.ledger.dropped.stale_server += answer.dropped_stale
            selection = select_groups(
                answer.groups,
                trainer_version=self.version(),
                max_staleness=self.config.max_staleness,
                group_size=self.config.group_size,
                already_trained=self.ledger,
                unit=self.config.staleness_unit,
            )
            self._release_dropped(selection)
            chosen.extend(self._masked(selection.fresh))
            if selection.fresh:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > self.config.stall_timeout_s:
                raise StarvedError(
                    f"no trainable group for {self.config.stall_timeout_s:.0f}s "
                    f"(have {len(chosen)}/{count}; the server filtered "
                    f"{self.filtered_groups()} groups whose rewards were all equal or under 2 "
                    "valid); is a rollout job running on the server?"
                )
        return chosen

    def _masked(self, groups: list[TrajectoryGroup]) -> list[TrajectoryGroup]:
        """By turn (``staleness_unit="turn"``): each group with its stale turns masked, counted."""
        if self.config.staleness_unit == "group":
            return groups
        masked = [
            mask_stale_turns(
                group, trainer_version=self.version(), max_staleness=self.config.max_staleness
            )
            for group in groups
        ]
        self.ledger.dropped.stale_turns_masked += sum(m.turns for m in masked)
        return [m.group for m in masked]

    def filtered_groups(self) -> int:
        """Groups the server's rollout job dropped before any pull: all rewards equal (no
        GRPO signal) or fewer than two valid samples. A policy that solves (or fails) every
        episode of its groups leaves the trainer waiting while this count climbs."""
        status = self.client.rollouts()
        return status.dropped_zero_variance + status.dropped_too_few_valid

    def _release_dropped(self, selection: Selection) -> None:
        """Count what will never be trained, and ack it so the server stops re-delivering it."""
        dropped = self.ledger.dropped
        dropped.stale_trainer += sum(len(g.trajectories) for g in selection.stale)
        dropped.already_trained += sum(len(g.trajectories) for g in selection.already_trained)
        dropped.malformed += sum(len(g.trajectories) for g in selection.malformed)
        if selection.dropped:
            self.client.ack([g.group_id for g in selection.dropped])
