"""What a checkpoint adds to TRL's own: the data position and the policy version.

TRL (``transformers.Trainer``) saves ``checkpoint-<step>/`` with the model, optimizer,
scheduler, RNG state and ``trainer_state.json``; ``train(resume_from_checkpoint=...)``
restores them. Beside those files the trainer writes ``rollgym-state.json``
(``CheckpointState``): the policy version of the checkpointed weights and the ids of the
groups trained since the previous checkpoint, which are acknowledged to the server only
*after* the checkpoint is on disk.

Why no trajectory is trained twice: a group trained after the last checkpoint is not acked,
so after a crash the server re-delivers it to a trainer that rolled back to before it; a
group in the checkpoint may have missed its ack (crash in between), so a resumed trainer
acks those ids first and skips them if they come back.

A checkpoint counts only once ``rollgym-state.json`` exists (it is written last, atomically).
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rollgym.trainer.errors import CheckpointError

STATE_FILE = "rollgym-state.json"
TRAINER_STATE_FILE = "trainer_state.json"  # written by transformers.Trainer
_CHECKPOINT_DIR = re.compile(r"^checkpoint-(\d+)$")


class DropCounts(BaseModel):
    """Trajectories not trained on, by reason (wasted samples are a metric, never silent)."""

    model_config = ConfigDict(extra="forbid")

    stale_server: int = Field(0, description="dropped by the server's window on pull")
    stale_trainer: int = Field(0, description="dropped by the trainer's own window check")
    already_trained: int = Field(0, description="re-delivered after a restart, skipped")
    malformed: int = Field(0, description="wrong group size or empty completion")
    stale_turns_masked: int = Field(
        0,
        description="turns out of the window masked from the loss of a group kept by its "
        "newest turn (staleness_unit 'turn'); their trajectories were trained, so not in total",
    )

    @property
    def total(self) -> int:
        return self.stale_server + self.stale_trainer + self.already_trained + self.malformed


class CheckpointState(BaseModel):
    """The run's position at a checkpoint (``rollgym-state.json``)."""

    model_config = ConfigDict(extra="forbid")

    format: int = 1
    step: int = Field(ge=0)
    policy_version: int = Field(ge=0, description="the version the checkpointed weights have")
    groups_trained: int = Field(ge=0)
    unacked_group_ids: list[str] = Field(
        description="trained up to this checkpoint; acked right after it was written"
    )
    dropped: DropCounts = Field(default_factory=DropCounts)


def write_state(checkpoint_dir: Path, state: CheckpointState) -> Path:
    """Write ``state`` into ``checkpoint_dir`` atomically (temp file, fsync, rename)."""
    target = checkpoint_dir / STATE_FILE
    fd, tmp = tempfile.mkstemp(dir=checkpoint_dir, prefix=".state-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(state.model_dump_json(indent=2))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def read_state(checkpoint_dir: Path) -> CheckpointState:
    """The ``CheckpointState`` of ``checkpoint_dir``; ``CheckpointError`` if absent or bad."""
    path = checkpoint_dir / STATE_FILE
    try:
        return CheckpointState.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        raise CheckpointError(
            f"{checkpoint_dir} is not a complete checkpoint (no {STATE_FILE})"
        ) from None
    except ValidationError as exc:
        raise CheckpointError(f"{path} is unreadable: {exc}") from exc


def latest_checkpoint(output_dir: Path) -> Path | None:
    """The complete checkpoint with the highest step under ``output_dir``, if any."""
    if not output_dir.is_dir():
        return None
    steps = []
    for child in output_dir.iterdir():
        match = _CHECKPOINT_DIR.match(child.name)
        complete = (child / STATE_FILE).is_file() and (child / TRAINER_STATE_FILE).is_file()
        if match and child.is_dir() and complete:
            steps.append((int(match.group(1)), child))
    return max(steps)[1] if steps else None
