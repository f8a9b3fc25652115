"""What keeps one request from hurting the others: a body cap and a last-resort error answer.

* ``BodyLimit`` (ASGI middleware): a body over ``max_bytes`` is refused with 413
  ``request_too_large``, from its ``Content-Length`` before it is read, or as it streams
  once it passes the cap; the app never buffers, parses or validates more than that. The
  weight upload (its own, larger cap) is exempt.
* ``LastResort`` (ASGI middleware, inside the routes' own handlers): an exception no
  handler translated is logged with its traceback and answered with the one error body
  (500 ``server_error``); no request ever gets a bare 500.

A third watch, on the event loop itself, is ``server.observability.event_loop``.
"""

from __future__ import annotations

import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rollgym.contract.wire import ErrorCode
from rollgym.server.http.errors import error_bytes

logger = logging.getLogger(__name__)


async def _answer(send: Send, status: int, code: str, message: str) -> None:
    body = error_bytes(code, message)
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """See the module docstring."""

    def __init__(self, app: ASGIApp, *, max_bytes: int, exempt: frozenset[str]):
        self.app = app
        self.max_bytes = max_bytes
        self.exempt = exempt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.exempt:
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send, int(declared))
            return
        received = 0
        over = False

        async def limited() -> Message:
            nonlocal received, over
            if over:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    over = True  # the app sees a client gone; its answer is replaced by ours
                    return {"type": "http.disconnect"}
            return message

        async def guarded(message: Message) -> None:
            if not over:
                await send(message)

        await self.app(scope, limited, guarded)
        if over:
            await self._refuse(send, received)

    async def _refuse(self, send: Send, size: int) -> None:
        await _answer(
            send,
            413,
            ErrorCode.REQUEST_TOO_LARGE,
            f"the body has {size} bytes or more, over the limit of {self.max_bytes} "
            "(max_body_bytes, ROLLGYM_MAX_BODY_BYTES)",
        )


class LastResort:
    """See the module docstring."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as exc:
            logger.exception("%s %s failed", scope.get("method"), scope.get("path"))
            if started:
                raise  # the answer is under way: nothing better to do than cut it
            await _answer(
                send, 500, ErrorCode.SERVER_ERROR, f"the server failed on this request: {exc!r}"
            )
