"""The box's end of a relayed connection: stdin and stdout spliced to one executor socket.

A box on a remote Docker host has no folder the host can reach, so the host reaches the
executor through the engine's own authenticated connection: it runs ``python3 -m
agent.relay SOCKET --listener-uid 0 --wait 60`` in the box with ``docker exec`` as the
relay's user, and every byte it writes to the exec's stdin goes to ``SOCKET``, every byte
the executor answers comes back on stdout. One relay carries one connection, for as long
as it lasts.

The relay does what the host does before it connects to a local box (``client``): the
socket must be a socket (not a link) of the relay's own user, in a folder of that user's
alone (mode 0700: the executor makes it so, since a tmpfs takes the image's mode), and whoever listens on it must be ``--listener-uid`` (``SO_PEERCRED``). The
executor, started with ``--relayed``, admits the relay's user alone. A refusal is one line
on stderr and exit status 1. When the host goes (stdin ends) the relay closes its
connection; when the executor closes it, the relay exits and the exec ends.
"""

from __future__ import annotations

import argparse
import os
import socket
import stat
import sys
import threading
import time

from .server import peer_credentials

CHUNK = 1 << 16
POLL_S = 0.01


def connect(path: str, listener_uid: int, wait_s: float) -> socket.socket:
    """A connection to ``path`` once it appears (within ``wait_s``), after the checks."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            info = os.lstat(path)
            break
        except FileNotFoundError:
            if time.monotonic() > deadline:
                raise ConnectionError(f"{path} did not appear within {wait_s:.0f} s") from None
            time.sleep(POLL_S)
    folder = os.lstat(os.path.dirname(path))
    if not stat.S_ISDIR(folder.st_mode) or folder.st_uid != os.getuid() or folder.st_mode & 0o077:
        raise ConnectionError(
            f"{os.path.dirname(path)} is not a folder of uid {os.getuid()} alone "
            f"(mode {stat.filemode(folder.st_mode)}, owner {folder.st_uid}): refusing it"
        )
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.getuid():
        raise ConnectionError(
            f"{path} is not a socket owned by uid {os.getuid()} "
            f"(mode {stat.filemode(info.st_mode)}, owner {info.st_uid}): refusing it"
        )
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    uid = peer_credentials(sock)[1]
    if uid != listener_uid:
        sock.close()
        raise ConnectionError(f"{path} is served by uid {uid}, not {listener_uid}")
    return sock


def _pump_stdin(sock: socket.socket) -> None:
    while chunk := os.read(0, CHUNK):
        sock.sendall(chunk)
    sock.shutdown(socket.SHUT_WR)  # the host is gone: the executor sees the end of stream


def splice(sock: socket.socket) -> None:
    """Copy stdin to ``sock`` and ``sock`` to stdout until the executor's side ends."""
    threading.Thread(target=_pump_stdin, args=(sock,), daemon=True).start()
    while chunk := sock.recv(CHUNK):
        view = memoryview(chunk)
        while view:
            view = view[os.write(1, view) :]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agent.relay", description=__doc__)
    parser.add_argument("socket", help="the executor socket to reach")
    parser.add_argument("--listener-uid", type=int, required=True, help="who must listen")
    parser.add_argument("--wait", type=float, default=0.0, help="seconds to wait for it")
    args = parser.parse_args(argv)
    try:
        sock = connect(args.socket, args.listener_uid, args.wait)
        splice(sock)
    except OSError as exc:
        print(f"agent.relay: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
