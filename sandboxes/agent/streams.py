"""Reading a command's stdout and stderr with a cap, until it is done or out of time.

Both the shell runner and the Python worker end up here: the command writes into two
pipes, and ``pump`` reads them while waiting on a *done* descriptor (a pidfd for a shell
command, the worker's control socket for Python). Output past the cap is read and dropped,
so a chatty command never blocks on a full pipe. When the command is done, ``drain``
takes what is left in the pipes without waiting for end-of-file: a background process
that inherited the pipes must not hold the call open.
"""

from __future__ import annotations

import enum
import os
import select
import socket
import time

CHUNK = 1 << 16


class Outcome(enum.Enum):
    DONE = "done"
    TIMEOUT = "timeout"
    HANGUP = "hangup"  # the host closed its connection: nobody waits for the answer


class CappedOutput:
    """One stream's bytes up to ``cap``; the rest is counted and dropped."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.dropped = 0

    def feed(self, chunk: bytes) -> None:
        room = self.cap - len(self.data)
        if room > 0:
            self.data += chunk[:room]
        self.dropped += max(0, len(chunk) - max(room, 0))

    @property
    def truncated(self) -> bool:
        return self.dropped > 0

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def _read_into(fd: int, sink: CappedOutput) -> bool:
    """Read what is there; False at end-of-file."""
    while True:
        try:
            chunk = os.read(fd, CHUNK)
        except BlockingIOError:
            return True
        if not chunk:
            return False
        sink.feed(chunk)
        if len(chunk) < CHUNK:
            return True


def _host_hung_up(sock: socket.socket) -> bool:
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def pump(
    outputs: dict[int, CappedOutput],
    done_fd: int,
    deadline: float,
    host: socket.socket | None = None,
) -> Outcome:
    """Read ``outputs`` (fd -> sink, non-blocking fds) until ``done_fd`` is readable."""
    poller = select.poll()
    for fd in outputs:
        poller.register(fd, select.POLLIN)
    poller.register(done_fd, select.POLLIN)
    if host is not None:
        poller.register(host.fileno(), select.POLLIN)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return Outcome.TIMEOUT
        for fd, _events in poller.poll(left * 1000):
            if fd == done_fd:
                return Outcome.DONE
            if fd in outputs:
                if not _read_into(fd, outputs[fd]):
                    poller.unregister(fd)
            elif host is not None and fd == host.fileno():
                if _host_hung_up(host):
                    return Outcome.HANGUP
                poller.unregister(fd)  # a pipelined request waits its turn


def drain(outputs: dict[int, CappedOutput]) -> None:
    for fd, sink in outputs.items():
        _read_into(fd, sink)
