"""The host's end of the executor socket: one request, one reply, with a deadline.

A client keeps one blocking connection for sync calls and one asyncio stream per event
loop for async calls; each is used by one call at a time (a lock), and is thrown away
after any failure, since a half-read reply leaves the stream out of step. Every
transport failure (refused, reset, closed, past the deadline) is a ``TransportError``:
the sandbox above turns it into ``SandboxDied``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import threading
from typing import Any

from .agent.framing import HEADER, FrameError, Message, body_length, decode_body, encode_frame
from .agent.framing import recv_frame as _recv_frame


class TransportError(Exception):
    """The executor could not be reached, or did not answer in time."""


@dataclasses.dataclass
class _AsyncConnection:
    loop: asyncio.AbstractEventLoop
    sock: socket.socket  # ours, so it can be closed after its loop is gone
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    lock: asyncio.Lock


class ExecutorClient:
    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._aconn: _AsyncConnection | None = None

    def call(self, request: dict[str, Any], deadline_s: float) -> Message:
        with self._lock:
            try:
                if self._sock is None:
                    self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    self._sock.settimeout(deadline_s)
                    self._sock.connect(self.socket_path)
                self._sock.settimeout(deadline_s)
                self._sock.sendall(encode_frame(request))
                reply = _recv_frame(self._sock)
            except TimeoutError as exc:
                self._close_sync()
                raise TransportError(f"no answer within {deadline_s:.1f} s") from exc
            except (OSError, FrameError) as exc:
                self._close_sync()
                raise TransportError(f"{type(exc).__name__}: {exc}") from exc
            if reply is None:
                self._close_sync()
                raise TransportError("the executor closed the connection")
            return reply

    async def acall(self, request: dict[str, Any], deadline_s: float) -> Message:
        conn = await self._aconnection(deadline_s)
        async with conn.lock:
            try:
                async with asyncio.timeout(deadline_s):
                    conn.writer.write(encode_frame(request))
                    await conn.writer.drain()
                    header = await conn.reader.readexactly(HEADER.size)
                    return decode_body(await conn.reader.readexactly(body_length(header)))
            except TimeoutError as exc:
                self._close_async()
                raise TransportError(f"no answer within {deadline_s:.1f} s") from exc
            except (OSError, FrameError, asyncio.IncompleteReadError) as exc:
                self._close_async()
                raise TransportError(f"{type(exc).__name__}: {exc}") from exc
            except asyncio.CancelledError:
                self._close_async()  # the reply would arrive on a stream nobody reads
                raise

    async def _aconnection(self, deadline_s: float) -> _AsyncConnection:
        loop = asyncio.get_running_loop()
        if self._aconn is not None and self._aconn.loop is loop:
            return self._aconn
        self._close_async()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            async with asyncio.timeout(deadline_s):
                await loop.sock_connect(sock, self.socket_path)
                reader, writer = await asyncio.open_unix_connection(sock=sock)
        except (OSError, TimeoutError) as exc:
            sock.close()
            raise TransportError(f"cannot connect to {self.socket_path}: {exc}") from exc
        self._aconn = _AsyncConnection(loop, sock, reader, writer, asyncio.Lock())
        return self._aconn

    def _close_sync(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _close_async(self) -> None:
        conn, self._aconn = self._aconn, None
        if conn is None:
            return
        try:
            same_loop = asyncio.get_running_loop() is conn.loop
        except RuntimeError:
            same_loop = False
        if same_loop:
            conn.writer.close()
        elif not conn.loop.is_closed():  # a transport is closed only from its own loop
            conn.loop.call_soon_threadsafe(conn.writer.close)
        else:
            conn.sock.close()

    def close(self) -> None:
        with self._lock:
            self._close_sync()
        self._close_async()
