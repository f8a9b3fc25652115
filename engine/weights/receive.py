"""Stream a request body into a file: the body's own chunks go to the disk as they are, in
one ``writev`` per part (nothing is joined), and while a thread writes one part the event
loop receives the next.

    received = await receive(request.stream(), path, max_bytes=16 << 30)

Only the file's data is written here; making it durable (``fsync``) is the caller's
business, so that it can overlap the work that follows.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from rollgym.engine.errors import WeightsTooLarge

PART_BYTES = 4 << 20  # the body is written in parts of about this size, each off the loop
_IOV_MAX = os.sysconf("SC_IOV_MAX")  # buffers one writev takes


async def receive(body: AsyncIterator[bytes], path: Path, *, max_bytes: int) -> int:
    """Write ``body`` to ``path``, created or written over in place (an existing file's
    cached pages take the bytes faster than new ones) and cut to the body's length; the
    bytes received. Raises ``WeightsTooLarge`` past ``max_bytes`` (the file then holds a
    prefix of the body, and whatever was there after it)."""
    received = 0
    part: list[bytes] = []
    part_bytes = 0
    writing: asyncio.Future[None] | None = None
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        async for chunk in body:
            received += len(chunk)
            if received > max_bytes:
                raise WeightsTooLarge(
                    f"the body exceeds the limit of {max_bytes} bytes "
                    "(max_weight_bytes, ROLLGYM_MAX_WEIGHT_BYTES)"
                )
            part.append(chunk)
            part_bytes += len(chunk)
            if part_bytes >= PART_BYTES:
                if writing is not None:
                    await writing
                writing = asyncio.ensure_future(asyncio.to_thread(write_all, fd, part))
                part, part_bytes = [], 0
        if writing is not None:
            await writing
        await asyncio.to_thread(write_all, fd, part)
        os.ftruncate(fd, received)
    finally:
        if writing is not None:
            await asyncio.wait([writing])  # the thread still uses the file
        os.close(fd)
    return received


def write_all(fd: int, parts: Sequence[bytes]) -> None:
    """Write ``parts`` in order with as few ``writev`` calls as the kernel allows."""
    views = [memoryview(p) for p in parts if p]
    first = 0  # views before it are written
    while first < len(views):
        written = os.writev(fd, views[first : first + _IOV_MAX])
        while written:  # a short write (rare on a file) leaves part of a view
            if written >= len(views[first]):
                written -= len(views[first])
                first += 1
            else:
                views[first] = views[first][written:]
                written = 0
