"""The archive's wire schema: trajectories the buffer kept after they left the training queue.

The buffer keeps every group it no longer hands out (trained on, or too stale to train on)
in an archive, for export as data (``rollgym export``); invalid trajectories (infrastructure
failures) were always kept aside. ``GET /admin/archive`` (its query: ``ArchiveQuery``) pages
through either with a cursor::

    page = ArchivePage(...)            # items in sampling order
    while page.next_after is not None:  # the next page starts after this seq
        ...
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from rollgym.contract.wire import MAX_VERSION, TrajectoryGroup

ArchiveKind = Literal["groups", "invalid"]
Outcome = Literal["trained", "stale", "invalid"]


class ArchiveQuery(BaseModel):
    """``GET /admin/archive``'s query: which archive, from where, how much."""

    kind: ArchiveKind = Field("groups", description="groups: trained and stale; invalid")
    after: int = Field(
        0, ge=0, le=MAX_VERSION, description="the previous page's next_after (0: the start)"
    )
    limit: int = Field(200, ge=1, le=2000, description="items in the page, at most")


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
