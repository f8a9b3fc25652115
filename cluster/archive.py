"""``GET /admin/archive`` over every server: their archives one after the other, by one cursor.

Each server pages its own archive by its own ``seq``. The router's cursor names the server
too, ``after = slot x STRIDE + seq``, so a client (``rollgym export --server <router>``)
reads server 0's archive, then server 1's..., page by page exactly as from one server;
each item's ``seq`` is given the same way, so it stays the cursor of the next page.

    >>> cursor(1, 5), place(cursor(1, 5))
    (1099511627781, (1, 5))
"""

from __future__ import annotations

from rollgym.cluster.errors import ServerLost
from rollgym.cluster.fleet import Fleet
from rollgym.contract.archive import ArchivePage, ArchiveQuery

STRIDE = 1 << 40  # one server's seqs (SQLite rowids) stay far below it


def cursor(slot: int, seq: int) -> int:
    """The router's cursor of ``seq`` in the archive of server ``slot``."""
    return slot * STRIDE + seq


def place(after: int) -> tuple[int, int]:
    """The server and its own cursor that a router's cursor names."""
    return divmod(after, STRIDE)


async def read_archive(fleet: Fleet, query: ArchiveQuery) -> ArchivePage:
    """One page of the archive the cursor points into; the last server's end ends it."""
    index, seq = place(query.after)
    if index >= len(fleet.slots):
        return ArchivePage(items=[], next_after=None)
    slot = fleet.slots[index]
    if not slot.serving or slot.api is None:
        raise ServerLost(
            f"server {slot.name} is not serving: its archive cannot be read now; retry shortly"
        )
    page = await slot.api.archive(query.model_copy(update={"after": seq}))
    items = [item.model_copy(update={"seq": cursor(index, item.seq)}) for item in page.items]
    if page.next_after is not None:
        next_after: int | None = cursor(index, page.next_after)
    else:
        next_after = cursor(index + 1, 0) if index + 1 < len(fleet.slots) else None
    return ArchivePage(items=items, next_after=next_after)
