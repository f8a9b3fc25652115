"""The host's end of a relayed box: connections to its executor through ``docker exec``.

A box on a remote Docker host shares no folder with this process, and it has no network,
so its executor is reached the one way the engine offers over its authenticated (TLS)
connection: ``ExecRelay.open`` runs ``agent.relay`` in the box as the relay's user with
its stdin attached, and the hijacked HTTP connection becomes a byte stream to the
executor's socket (``ExecStream``; the engine frames stdout and stderr, which it takes
apart). The exec is made once per connection; every call after that is one frame each
way through the engine, no exec per call. The relay checks the socket in the box as the
host checks a local one (``agent.relay``), and the executor admits the relay's user alone
(``--relayed``).

A relayed connection is a blocking TLS socket, so async calls run it on ``calls``, a
thread pool of the provider's (``ExecutorClient``).
"""

from __future__ import annotations

import io
import struct
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests

import docker

STREAM_HEADER = struct.Struct(">BxxxL")  # the engine's frame: stream (1 out, 2 err), size
STDERR = 2


class ExecStream:
    """One relayed connection: bytes in on the exec's stdin, out of its stdout frames.

    Has the socket methods the executor client uses (``sendall``, ``recv``,
    ``settimeout``, ``close``). What the relay writes to stderr (its one-line refusal)
    becomes the error at the end of the stream.
    """

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self._left = 0  # bytes of the current stdout frame not read yet
        self._errors = bytearray()

    def settimeout(self, timeout: float | None) -> None:
        self._sock.settimeout(timeout)

    def sendall(self, data: bytes) -> None:
        self._sock.sendall(data)

    def recv(self, size: int) -> bytes:
        while self._left == 0:
            header = self._exactly(STREAM_HEADER.size)
            if header is None:
                if self._errors:
                    raise ConnectionError(self._errors.decode(errors="replace").strip())
                return b""
            stream, length = STREAM_HEADER.unpack(header)
            if stream == STDERR:
                self._errors += self._exactly(length) or b""
            else:
                self._left = length
        chunk = self._sock.recv(min(size, self._left))
        if not chunk:
            raise ConnectionError("the relay's stream ended inside a frame")
        self._left -= len(chunk)
        return bytes(chunk)

    def _exactly(self, size: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < size:
            chunk = self._sock.recv(size - len(buf))
            if not chunk:
                if buf:
                    raise ConnectionError("the relay's stream ended inside a header")
                return None
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self._sock.close()


class ExecRelay:
    """Opens connections to the sockets of one box through ``agent.relay`` in it."""

    def __init__(
        self,
        api: docker.APIClient,
        container_id: str,
        *,
        relay_uid: int,
        listener_uid: int,
        calls: ThreadPoolExecutor,
    ) -> None:
        self._api = api
        self._container_id = container_id
        self._user = f"{relay_uid}:{relay_uid}"
        self._listener_uid = listener_uid
        self.calls = calls

    def open(self, socket_path: str, deadline_s: float) -> ExecStream:
        """A stream to ``socket_path`` in the box, waiting up to ``deadline_s`` for it.

        Raises ``ConnectionError`` (an ``OSError``) when the engine refuses the exec."""
        command = [
            "python3", "-B", "-m", "agent.relay", socket_path,
            "--listener-uid", str(self._listener_uid), "--wait", f"{deadline_s:.3f}",
        ]  # fmt: skip
        try:
            exec_id = self._api.exec_create(
                self._container_id, command, stdin=True, user=self._user
            )["Id"]
            sock = self._api.exec_start(exec_id, socket=True)
        except (docker.errors.DockerException, requests.RequestException) as exc:
            raise ConnectionError(f"the engine would not relay to {socket_path}: {exc}") from exc
        sock.settimeout(deadline_s)
        return ExecStream(sock)


def code_archive(folder: Path) -> bytes:
    """A tar of ``folder``'s ``*.py`` files, root's and read-only to everyone else."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for source in sorted(folder.glob("*.py")):
            data = source.read_bytes()
            info = tarfile.TarInfo(source.name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
