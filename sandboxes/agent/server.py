"""A unix-socket server loop shared by the executor and the Python worker.

Requests are served one at a time, from any number of connections; a ``tick`` callback
runs at least every time it asks for (the executor's watchdog on Python calls). A server
may refuse peers (``admit``: the executor takes no connection from inside its own box) and
may end itself once no host has been connected for a while (``orphan_after``: a box whose
owner died goes away by itself).
"""

from __future__ import annotations

import os
import selectors
import socket
import struct
import time
from collections.abc import Callable

from .framing import Frame, FrameError, FrameReader, send_frame

Handler = Callable[[Frame, socket.socket], Frame]
Admit = Callable[[socket.socket], bool]
PEER_CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """The peer's (pid, uid, gid) as the kernel saw it, in our own namespaces.

    For a connecting client these are the listener's credentials when it called
    ``listen``; for an accepted connection, the connecting process's. A process outside
    our pid namespace has pid 0.
    """
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, PEER_CREDENTIALS.size)
    pid, uid, gid = PEER_CREDENTIALS.unpack(raw)
    return pid, uid, gid


def from_outside_the_box(conn: socket.socket) -> bool:
    """True for a peer outside our pid namespace: the host, never a process in the box."""
    return peer_credentials(conn)[0] == 0


def from_user(uid: int) -> Admit:
    """Admit peers of ``uid`` alone: a relayed box's executor admits its relay's user."""

    def admit(conn: socket.socket) -> bool:
        return peer_credentials(conn)[1] == uid

    return admit


def listen(path: str) -> socket.socket:
    """Bind and listen on ``path`` (mode 0600), made visible by an atomic rename once ready.

    The socket belongs to whoever's file-system identity is in force: the executor binds
    its sockets as the host's user, in a folder only that user may enter.
    """
    staging = f"{path}.{os.getpid()}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(staging)
    os.chmod(staging, 0o600)
    server.listen(64)
    os.rename(staging, path)
    return server


def serve(
    server: socket.socket,
    handle: Handler,
    *,
    tick: Callable[[], float] = lambda: 1.0,
    exit_with: int | None = None,
    admit: Admit | None = None,
    orphan_after: float | None = None,
) -> None:
    """Serve until the process ``exit_with`` (our parent) is gone, or until no connection
    has been open for ``orphan_after`` seconds; forever if both are None."""
    selector = selectors.DefaultSelector()
    selector.register(server, selectors.EVENT_READ)
    alone_since = time.monotonic()
    while True:
        wait = tick() if orphan_after is None else min(tick(), orphan_after)
        ready = selector.select(timeout=wait)
        if exit_with is not None and os.getppid() != exit_with:
            return
        for key, _ in ready:
            if key.fileobj is server:
                conn, _ = server.accept()
                if admit is not None and not admit(conn):
                    conn.close()
                    continue
                selector.register(conn, selectors.EVENT_READ, FrameReader(conn))
            elif not _answer(handle, key.data):
                selector.unregister(key.fileobj)
                key.data.sock.close()
        if orphan_after is None:
            continue
        if len(selector.get_map()) > 1:  # a host is connected
            alone_since = time.monotonic()
        elif time.monotonic() - alone_since > orphan_after:
            return


def _answer(handle: Handler, reader: FrameReader) -> bool:
    """Serve the requests waiting on one connection; False once the host hung up."""
    try:
        while (request := reader.read()) is not None:
            send_frame(reader.sock, handle(request, reader.sock))
            if not reader.has_frame():
                return True
    except (FrameError, OSError):
        pass
    return False
