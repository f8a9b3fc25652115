"""The archive route (admin token): trained, stale and invalid trajectories, page by page.

| method | path | answer |
|---|---|---|
| GET | ``/admin/archive?kind=groups&after=0&limit=200`` | ``ArchivePage`` |

``kind=groups`` reads the groups that left the training queue (``trained`` or ``stale``),
``kind=invalid`` the trajectories kept aside as infrastructure failures; ``after`` is the
previous page's ``next_after``. ``rollgym export --server URL`` reads it to the end.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from rollgym.contract.archive import ArchiveKind, ArchivePage
from rollgym.contract.wire import MAX_VERSION
from rollgym.server.routes.deps import ServicesDep, require_admin

router = APIRouter(prefix="/admin", dependencies=[Depends(require_admin)])


@router.get("/archive")
async def read_archive(
    services: ServicesDep,
    kind: ArchiveKind = "groups",
    after: Annotated[int, Query(ge=0, le=MAX_VERSION)] = 0,  # a cursor: SQLite's integers
    limit: Annotated[int, Query(ge=1, le=2000)] = 200,
) -> ArchivePage:
    return await services.buffer.read_archive(kind, after, limit)
