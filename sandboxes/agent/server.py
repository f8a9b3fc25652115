"""A unix-socket server loop shared by the executor and the Python worker.

Requests are served one at a time, from any number of connections; a ``tick`` callback
runs at least every time it asks for (the executor's watchdog on Python calls).
"""

from __future__ import annotations

import os
import selectors
import socket
from collections.abc import Callable

from .framing import FrameError, FrameReader, Message, send_frame

Handler = Callable[[Message, socket.socket], Message]


def listen(path: str) -> socket.socket:
    """Bind and listen on ``path``, made visible by an atomic rename once ready."""
    staging = f"{path}.{os.getpid()}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(staging)
    os.chmod(staging, 0o666)  # the host connects as another uid; the folder guards access
    server.listen(64)
    os.rename(staging, path)
    return server


def serve(
    server: socket.socket,
    handle: Handler,
    *,
    tick: Callable[[], float] = lambda: 1.0,
    exit_with: int | None = None,
) -> None:
    """Serve until the process ``exit_with`` (our parent) is gone; forever if None."""
    selector = selectors.DefaultSelector()
    selector.register(server, selectors.EVENT_READ)
    while True:
        ready = selector.select(timeout=tick())
        if exit_with is not None and os.getppid() != exit_with:
            return
        for key, _ in ready:
            if key.fileobj is server:
                conn, _ = server.accept()
                selector.register(conn, selectors.EVENT_READ, FrameReader(conn))
            elif not _answer(handle, key.data):
                selector.unregister(key.fileobj)
                key.data.sock.close()


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
