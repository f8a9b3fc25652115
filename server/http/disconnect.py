"""Work that stops when its client leaves (``stops_with_client``).

A client that disconnects before its answer is sent (a timeout, a killed agent) must not
keep the engine busy: the decorated route runs beside a watch on its connection (ASGI's
``http.disconnect``) and is cancelled when the client leaves, as vLLM's own server does
(``with_cancellation``). The cancellation reaches the engine, which aborts the generation
and says what it had sampled (``Abandoned``); the agent key is charged that
(``TokenHold``). A session's turn that was cut so is not recorded: the same call may be
made again. The cancelled route answers an empty 499 (nginx's "client closed request"),
which goes nowhere.

The route takes the request as ``raw_request: Request``, and its body must be parsed
before it runs (a FastAPI body model): the watch consumes what else arrives.
A streamed answer, once it is returned, is watched by Starlette's ``StreamingResponse``.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from fastapi import Request, Response

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])
CLIENT_CLOSED = 499


def stops_with_client(route: F) -> F:
    """``route`` (a FastAPI handler with a ``raw_request`` parameter), cancelled when its
    client disconnects (see the module docstring)."""

    @functools.wraps(route)
    async def watched(*args: Any, **kwargs: Any) -> Any:
        work = asyncio.ensure_future(route(*args, **kwargs))
        watch = asyncio.ensure_future(_disconnect(kwargs["raw_request"]))
        try:
            await asyncio.wait([work, watch], return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            work.cancel()
            raise
        finally:
            watch.cancel()
        if work.done():
            return work.result()
        work.cancel()
        await asyncio.wait([work])  # until the engine has aborted and the key is charged
        return Response(status_code=CLIENT_CLOSED)

    return watched  # type: ignore[return-value]


async def _disconnect(request: Request) -> None:
    """Returns when the client has disconnected."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
