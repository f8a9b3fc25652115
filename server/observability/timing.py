"""Where a request's time goes, as the server itself measures it.

``ServerTiming`` (ASGI middleware, outside the others) starts a clock when a request
reaches the app and, as the answer starts, reads it into a ``Server-Timing`` header
(milliseconds, the header's unit)::

    Server-Timing: total;dur=14.912, engine;dur=14.301, http;dur=0.611

``engine`` is the time the request spent awaiting the engine (code that awaits it runs
inside ``engine_span()``; spans that overlap, like a chat call's ``n`` choices, count
once), ``http`` the rest: body parsing, validation, auth, routing, the handler's own work,
building the answer, the middlewares and the event loop's waits in between. The clock
stops as the answer starts; its body follows in one write. The client's own cost and the
network are outside it, so ``http`` is the server's overhead per call.

    >>> clock = RequestClock(started=0.0)
    >>> clock.enter(0.001); clock.enter(0.002); clock.leave(0.004); clock.leave(0.005)
    >>> clock.header(0.0055).decode()
    'total;dur=5.500, engine;dur=4.000, http;dur=1.500'
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator

from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = b"server-timing"
_current: contextvars.ContextVar[RequestClock | None] = contextvars.ContextVar(
    "rollgym_request_clock", default=None
)


class RequestClock:
    """One request's clock: when it arrived and how long it has awaited the engine."""

    __slots__ = ("_active", "_engine_s", "_since", "started")

    def __init__(self, started: float):
        self.started = started
        self._engine_s = 0.0
        self._active = 0  # engine spans open now
        self._since = 0.0  # when the first of them opened

    def enter(self, now: float) -> None:
        if self._active == 0:
            self._since = now
        self._active += 1

    def leave(self, now: float) -> None:
        self._active -= 1
        if self._active == 0:
            self._engine_s += now - self._since

    def engine_s(self, now: float) -> float:
        """Engine time so far, a span still open included (a streamed answer)."""
        return self._engine_s + (now - self._since if self._active else 0.0)

    def header(self, now: float) -> bytes:
        total_ms = (now - self.started) * 1e3
        engine_ms = self.engine_s(now) * 1e3
        return b"total;dur=%.3f, engine;dur=%.3f, http;dur=%.3f" % (
            total_ms,
            engine_ms,
            total_ms - engine_ms,
        )


@contextlib.contextmanager
def engine_span() -> Iterator[None]:
    """Count the time inside as the current request's engine time (none outside a request)."""
    clock = _current.get()
    if clock is None:
        yield
        return
    clock.enter(time.perf_counter())
    try:
        yield
    finally:
        clock.leave(time.perf_counter())


class ServerTiming:
    """See the module docstring."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        clock = RequestClock(time.perf_counter())

        async def timed(message: Message) -> None:
            if message["type"] == "http.response.start":
                timing = (HEADER, clock.header(time.perf_counter()))
                message = {**message, "headers": [*message.get("headers", ()), timing]}
            await send(message)

        token = _current.set(clock)
        try:
            await self.app(scope, receive, timed)
        finally:
            _current.reset(token)
