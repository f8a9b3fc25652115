"""The archive's wire schema: trajectories the buffer kept after they left the training queue.

The buffer keeps every group it no longer hands out (trained on, or too stale to train on)
in an archive, for export as data (``rollgym export``); invalid trajectories (infrastructure
failures) were always kept aside. ``GET /admin/archive`` pages through either with a
cursor::

    page = ArchivePage(...)            # items in sampling order
    while page.next_after is not None:  # the next page starts after this seq
        ...
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from rollgym.contract.wire import TrajectoryGroup

ArchiveKind = Literal["groups", "invalid"]
Outcome = Literal["trained", "stale", "invalid"]


class ArchivedGroup(BaseModel):
    """One archived group; an invalid trajectory comes as a group of one."""

    seq: int = Field(description="its place in the archive: the cursor of the next page")
    outcome: Outcome = Field(
        description="trained: acked by a trainer; stale: dropped by the staleness window; "
        "invalid: an infrastructure failure, never trained on"
    )
    archived_at: float
    group: TrajectoryGroup


class ArchivePage(BaseModel):
    items: list[ArchivedGroup]
    next_after: int | None = Field(description="pass as ``after`` for the next page; None: done")
