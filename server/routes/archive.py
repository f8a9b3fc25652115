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

from rollgym.contract import api
from rollgym.contract.archive import ArchivePage, ArchiveQuery
from rollgym.server.http.declared import declared
from rollgym.server.routes.deps import ServicesDep, require_admin

router = APIRouter(dependencies=[Depends(require_admin)])


@declared(router, api.ARCHIVE)
async def read_archive(
    services: ServicesDep, query: Annotated[ArchiveQuery, Query()]
) -> ArchivePage:
    return await services.buffer.read_archive(query.kind, query.after, query.limit)
