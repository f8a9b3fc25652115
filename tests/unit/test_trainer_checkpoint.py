"""Checkpoint state files and the data ledger (no TRL involved)."""

from __future__ import annotations

import pytest

from rollgym.trainer.checkpoint import (
    STATE_FILE,
    TRAINER_STATE_FILE,
    CheckpointState,
    latest_checkpoint,
    read_state,
    write_state,
)
from rollgym.trainer.errors import CheckpointError
from rollgym.trainer.ledger import DataLedger


def _checkpoint(root, step, *, complete=True):
    folder = root / f"checkpoint-{step}"
    folder.mkdir()
    (folder / TRAINER_STATE_FILE).write_text("{}")
    if complete:
        write_state(
            folder,
            CheckpointState(
                step=step, policy_version=step + 1, groups_trained=0, unacked_group_ids=[]
            ),
        )
    return folder


def test_latest_checkpoint_skips_incomplete_ones(tmp_path) -> None:
    assert latest_checkpoint(tmp_path / "missing") is None
    _checkpoint(tmp_path, 5)
    newest_complete = _checkpoint(tmp_path, 10)
    _checkpoint(tmp_path, 15, complete=False)  # crashed before rollgym-state.json
    (tmp_path / "checkpoint-junk").mkdir()
    assert latest_checkpoint(tmp_path) == newest_complete
    assert read_state(newest_complete).policy_version == 11


def test_state_round_trips_and_a_missing_file_is_a_clear_error(tmp_path) -> None:
    state = CheckpointState(
        step=3, policy_version=4, groups_trained=12, unacked_group_ids=["a", "b"]
    )
    write_state(tmp_path, state)
    assert read_state(tmp_path) == state
    assert not list(tmp_path.glob(".state-*"))  # no temp file left behind
    (tmp_path / STATE_FILE).unlink()
    with pytest.raises(CheckpointError, match="not a complete checkpoint"):
        read_state(tmp_path)


def test_ledger_tracks_pending_ids_until_acked_and_remembers_resumed_ones() -> None:
    ledger = DataLedger()
    ledger.record_batch(["g1", "g2"])
    assert "g1" in ledger and "g3" not in ledger
    snapshot = ledger.snapshot(step=1, policy_version=2)
    assert snapshot.unacked_group_ids == ["g1", "g2"] and snapshot.groups_trained == 2
    ledger.mark_acked(snapshot.unacked_group_ids)
    assert ledger.pending == [] and "g1" not in ledger

    resumed = DataLedger(snapshot)  # a restart from the checkpoint before its ack landed
    assert "g2" in resumed and resumed.groups_trained == 2
    assert resumed.restored == ["g1", "g2"]
    resumed.mark_acked(["g1", "g2"])
    assert "g1" in resumed  # still skipped if the server re-sends it after the late ack
