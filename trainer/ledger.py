"""The data position of a run: which groups were trained, which still await their ack.

``DataLedger`` is the in-memory side of ``checkpoint.CheckpointState``. Groups enter it when
they are handed to TRL for an optimizer step (``record_batch``); a checkpoint snapshots the
ids not yet acknowledged (``snapshot``), and once the checkpoint is on disk they are acked
and forgotten (``mark_acked``). ``already_trained`` answers whether a pulled group must be
skipped: it is pending, or it came from the checkpoint this run resumed from.
"""

from __future__ import annotations

from collections.abc import Iterable

from rollgym.trainer.checkpoint import CheckpointState, DropCounts


class DataLedger:
    """Trained-group bookkeeping between checkpoints (see the module docstring)."""

    def __init__(self, resumed: CheckpointState | None = None) -> None:
        self.pending: list[str] = []  # trained, not yet in a checkpoint that was acked
        self._pending_set: set[str] = set()
        self.groups_trained = resumed.groups_trained if resumed else 0
        self.dropped = resumed.dropped.model_copy() if resumed else DropCounts()
        # From the resumed checkpoint: trained, maybe never acked; skipped if re-delivered.
        self._restored: set[str] = set(resumed.unacked_group_ids) if resumed else set()

    def already_trained(self, group_id: str) -> bool:
        return group_id in self._restored or group_id in self._pending_set

    def __contains__(self, group_id: object) -> bool:
        return isinstance(group_id, str) and self.already_trained(group_id)

    def record_batch(self, group_ids: Iterable[str]) -> None:
        """These groups go into the optimizer step being taken now."""
        ids = list(group_ids)
        self.pending.extend(ids)
        self._pending_set.update(ids)
        self.groups_trained += len(ids)

    def snapshot(self, *, step: int, policy_version: int) -> CheckpointState:
        """The state a checkpoint at ``step`` stores; ``policy_version`` of its weights."""
        return CheckpointState(
            step=step,
            policy_version=policy_version,
            groups_trained=self.groups_trained,
            unacked_group_ids=list(self.pending),
            dropped=self.dropped.model_copy(),
        )

    def mark_acked(self, group_ids: Iterable[str]) -> None:
        """The server confirmed these ids; a checkpoint no longer needs to carry them.

        Ids restored from the resumed checkpoint stay in the skip set for the whole session:
        the server may have re-queued them (lease timeout) before their late ack arrived.
        """
        done = set(group_ids)
        self.pending = [g for g in self.pending if g not in done]
        self._pending_set -= done

    @property
    def restored(self) -> list[str]:
        """Ids from the resumed checkpoint: trained before the restart, skipped if re-sent."""
        return sorted(self._restored)
