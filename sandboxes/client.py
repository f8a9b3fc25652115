"""The host's end of the executor socket: one request, one reply, with a deadline.

A client keeps one blocking connection for sync calls and one asyncio connection (on the
loop that made it) for async calls; each is used by one call at a time (a lock), and is thrown away
after any failure, since a half-read reply leaves the stream out of step. Every
transport failure (refused, reset, closed, past the deadline, a frame over ``max_frame``)
is a ``TransportError``: the sandbox above decides what it means.

The host never follows a path the box controls. Before connecting, the socket file must
be a socket (not a link) owned by this process's user, which made the folder it lies in
and is the only user that may enter it; after connecting, the listener's credentials
(``SO_PEERCRED``) must be ``listener_uid``'s, the executor's user.

A box on another host is reached through a ``Relay`` instead (``docker.relay``): it opens
a stream to the socket by its path in the box, and the relay in the box makes the same
checks there. A relayed stream blocks, so async calls run on the relay's thread pool.
"""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import threading
from concurrent.futures import Executor
from typing import Any, Protocol, cast

from .agent.framing import (
    HEADER,
    MAX_FRAME_BYTES,
    Frame,
    FrameError,
    FrameReader,
    body_length,
    decode_body,
    encode_frame,
)
from .agent.server import peer_credentials


class TransportError(Exception):
    """The executor could not be reached, or did not answer in time."""


class Relay(Protocol):
    """A way to a box's sockets other than this host's file system."""

    @property
    def calls(self) -> Executor:
        """Where async calls wait on a relayed stream."""
        ...

    def open(self, socket_path: str, deadline_s: float) -> Any:
        """A connected stream (``sendall``, ``recv``, ``settimeout``, ``close``) to
        ``socket_path`` in the box; ``OSError`` when there is none."""
        ...


class _ReplyProtocol(asyncio.Protocol):
    """One asyncio connection to the executor: frames in, one pending reply at a time.

    Lighter than streams (one future per call, no per-read waits), which matters at
    thousands of calls per second on one event loop.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, limit: int) -> None:
        self.loop = loop
        self.sock = sock  # ours, so it can be closed after its loop is gone
        self.limit = limit
        self.transport: asyncio.WriteTransport | None = None
        self.lock = asyncio.Lock()
        self._buf = bytearray()
        self._pending: asyncio.Future[Frame] | None = None
        self._lost: str | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio's, but have the same methods.
        self.transport = cast(asyncio.WriteTransport, transport)

    def data_received(self, data: bytes) -> None:
        self._buf += data
        if len(self._buf) < HEADER.size:
            return
        try:
            end = HEADER.size + body_length(self._buf[: HEADER.size], self.limit)
            if len(self._buf) < end:
                return
            message = decode_body(bytes(self._buf[HEADER.size : end]))
        except FrameError as exc:
            self._fail(f"bad frame: {exc}")
            return
        del self._buf[:end]
        if self._pending is not None and not self._pending.done():
            self._pending.set_result(message)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(f"the executor closed the connection ({exc or 'end of stream'})")

    def _fail(self, reason: str) -> None:
        self._lost = reason
        if self._pending is not None and not self._pending.done():
            self._pending.set_exception(TransportError(reason))

    async def request(self, payload: bytes, deadline_s: float) -> Frame:
        if self._lost is not None or self.transport is None:
            raise TransportError(self._lost or "not connected")
        self._pending = future = self.loop.create_future()
        self.transport.write(payload)
        timer = self.loop.call_later(deadline_s, _expire, future, deadline_s)
        try:
            return await future
        finally:
            timer.cancel()
            self._pending = None

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def _expire(future: asyncio.Future[Frame], deadline_s: float) -> None:
    if not future.done():
        future.set_exception(TransportError(f"no answer within {deadline_s:.1f} s"))


class ExecutorClient:
    def __init__(
        self,
        socket_path: str,
        *,
        listener_uid: int,
        max_frame: int = MAX_FRAME_BYTES,
        relay: Relay | None = None,
    ) -> None:
        self.socket_path = socket_path
        self.relay = relay
        self.listener_uid = listener_uid
        self.max_frame = max_frame
        self._sock: socket.socket | None = None
        self._reader: FrameReader | None = None
        self._lock = threading.Lock()
        self._aconn: _ReplyProtocol | None = None

    def call(self, request: dict[str, Any], deadline_s: float) -> Frame:
        with self._lock:
            try:
                if self._sock is None:
                    self._sock = self._connect(deadline_s)
                    self._reader = FrameReader(self._sock, self.max_frame)
                assert self._reader is not None
                self._sock.settimeout(deadline_s)
                self._sock.sendall(encode_frame(request))
                reply = self._reader.read()
            except TransportError:
                self._close_sync()
                raise
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

    def _connect(self, deadline_s: float) -> socket.socket:
        if self.relay is not None:  # a stream with the socket methods used here
            return cast(socket.socket, self.relay.open(self.socket_path, deadline_s))
        self._check_path()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(deadline_s)
            sock.connect(self.socket_path)
            self._check_listener(sock)
        except BaseException:
            sock.close()
            raise
        return sock

    async def acall(self, request: dict[str, Any], deadline_s: float) -> Frame:
        if self.relay is not None:
            call = self.relay.calls.submit(self.call, request, deadline_s)
            return await asyncio.wrap_future(call)
        conn = await self._aconnection(deadline_s)
        async with conn.lock:
            try:
                return await conn.request(encode_frame(request), deadline_s)
            except TransportError:
                self._close_async()
                raise
            except asyncio.CancelledError:
                self._close_async()  # the reply would arrive on a stream nobody reads
                raise

    async def _aconnection(self, deadline_s: float) -> _ReplyProtocol:
        loop = asyncio.get_running_loop()
        if self._aconn is not None and self._aconn.loop is loop:
            return self._aconn
        self._close_async()
        self._check_path()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            async with asyncio.timeout(deadline_s):
                await loop.sock_connect(sock, self.socket_path)
                self._check_listener(sock)
                _, protocol = await loop.create_unix_connection(
                    lambda: _ReplyProtocol(loop, sock, self.max_frame), sock=sock
                )
        except (OSError, TimeoutError, TransportError) as exc:
            sock.close()
            raise TransportError(f"cannot connect to {self.socket_path}: {exc}") from exc
        self._aconn = protocol
        return protocol

    def _check_path(self) -> None:
        """The socket file is a socket of our own user's, not a link or a stranger's file."""
        try:
            info = os.lstat(self.socket_path)
        except OSError as exc:
            raise TransportError(f"cannot connect to {self.socket_path}: {exc}") from exc
        if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.getuid():
            raise TransportError(
                f"{self.socket_path} is not a socket owned by uid {os.getuid()} "
                f"(mode {stat.filemode(info.st_mode)}, owner {info.st_uid}): refusing it"
            )

    def _check_listener(self, sock: socket.socket) -> None:
        """Whoever listens on the other end is the executor's user (``SO_PEERCRED``)."""
        uid = peer_credentials(sock)[1]
        if uid != self.listener_uid:
            raise TransportError(
                f"{self.socket_path} is served by uid {uid}, not the executor's "
                f"{self.listener_uid} (is the Docker engine remapping users?)"
            )

    def _close_sync(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock, self._reader = None, None

    def _close_async(self) -> None:
        conn, self._aconn = self._aconn, None
        if conn is None:
            return
        try:
            same_loop = asyncio.get_running_loop() is conn.loop
        except RuntimeError:
            same_loop = False
        if same_loop:
            conn.close()
        elif not conn.loop.is_closed():  # a transport is closed only from its own loop
            conn.loop.call_soon_threadsafe(conn.close)
        else:  # its loop is gone: nothing will touch the transport again
            conn.sock.close()

    def close(self) -> None:
        with self._lock:
            self._close_sync()
        self._close_async()
