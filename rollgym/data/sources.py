"""Where exported trajectories come from: a server's archive, read offline or over HTTP.

Both yield ``(trajectory, outcome)`` pairs in archive order (trained and stale groups in
the order they were sampled, then the invalid trajectories if asked for):

* ``from_data_dir(dir)``: the buffer file under a server's data dir, opened read-only
  (the server may be running: SQLite's WAL lets readers in while it writes);
* ``from_server(url, token)``: ``GET /admin/archive`` page by page (admin token), a server's
  or a cluster router's (every server's archive in turn).

Both take a ``progress(read, total)`` called after each page: groups (and invalid
trajectories) read so far, and how many there are (the file knows; a server does not: None,
until a last call with ``total == read`` once its archive ends).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from itertools import chain
from pathlib import Path

import httpx

from rollgym.contract import api
from rollgym.contract.archive import ArchiveKind, ArchivePage, ArchiveQuery
from rollgym.contract.wire import ErrorBody, Trajectory
from rollgym.data.errors import DataError
from rollgym.data.rows import RowOutcome

Item = tuple[Trajectory, RowOutcome]
Progress = Callable[[int, "int | None"], object]  # (groups read, groups in all or None)


def items_of(pages: Iterable[ArchivePage]) -> Iterator[Item]:
    for page in pages:
        for archived in page.items:
            for trajectory in archived.group.trajectories:
                yield trajectory, archived.outcome


def _counted(
    pages: Iterable[ArchivePage], progress: Progress | None, total: int | None
) -> Iterator[ArchivePage]:
    """``pages``, with ``progress`` told the count after each; with no ``total`` known, the
    count once more as the total when the pages end."""
    read = 0
    for page in pages:
        yield page
        read += len(page.items)
        if progress is not None:
            progress(read, total)
    if progress is not None and total is None:
        progress(read, read)


def _kinds(include_invalid: bool) -> tuple[ArchiveKind, ...]:
    return ("groups", "invalid") if include_invalid else ("groups",)


def from_data_dir(
    data_dir: Path,
    *,
    file_name: str = "buffer.sqlite3",
    include_invalid: bool = False,
    progress: Progress | None = None,
) -> Iterator[Item]:
    from rollgym.server.buffer.archive import ArchiveFile

    path = data_dir / file_name
    if not path.is_file():
        raise DataError(f"no buffer at {path}: pass the server's --data-dir")
    with ArchiveFile(path) as archive:
        kinds = _kinds(include_invalid)
        pages = chain.from_iterable(archive.pages(kind) for kind in kinds)
        total = sum(archive.count(kind) for kind in kinds)
        yield from items_of(_counted(pages, progress, total))


def from_server(
    url: str,
    token: str,
    *,
    include_invalid: bool = False,
    page_size: int = 500,
    progress: Progress | None = None,
) -> Iterator[Item]:
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=120.0) as http:
        kinds = _kinds(include_invalid)
        pages = chain.from_iterable(_server_pages(http, kind, page_size) for kind in kinds)
        yield from items_of(_counted(pages, progress, None))


def _server_pages(http: httpx.Client, kind: ArchiveKind, page_size: int) -> Iterator[ArchivePage]:
    route = api.ARCHIVE
    assert route.answer is not None
    after: int | None = 0
    while after is not None:
        query = ArchiveQuery(kind=kind, after=after, limit=page_size)
        try:
            response = http.request(route.method, route.path, params=query.model_dump())
        except httpx.HTTPError as exc:
            raise DataError(f"the server did not answer: {exc!r}") from exc
        if response.status_code != 200:
            try:
                message = ErrorBody.model_validate_json(response.content).message
            except ValueError:
                message = response.text[:200]
            raise DataError(
                f"{route.method} {route.path} answered {response.status_code}: {message}"
            )
        page = route.answer.model_validate_json(response.content)
        yield page
        after = page.next_after
