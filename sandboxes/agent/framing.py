"""Length-prefixed JSON frames: the wire format between the host and the executor.

A frame is a 4-byte big-endian body length, then a UTF-8 JSON object. Bytes (file
contents) travel base64-encoded inside the JSON. A peer that closes between frames is a
clean end (``FrameReader.read`` returns ``None``); a close inside a frame is a
``FrameError``.
"""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Mapping
from typing import Any

HEADER = struct.Struct("!I")
MAX_FRAME_BYTES = 1 << 28  # 256 MiB: a guard against a corrupt length, not a quota
READ_SIZE = 1 << 16

Frame = dict[str, Any]


class FrameError(Exception):
    """A malformed frame, or a peer that hung up inside one."""


def encode_frame(message: Mapping[str, Any]) -> bytes:
    body = json.dumps(message, separators=(",", ":")).encode()
    if len(body) > MAX_FRAME_BYTES:
        raise FrameError(f"frame of {len(body)} bytes exceeds {MAX_FRAME_BYTES}")
    return HEADER.pack(len(body)) + body


def body_length(header: bytes | bytearray, limit: int = MAX_FRAME_BYTES) -> int:
    (length,) = HEADER.unpack(header)
    if length > limit:
        raise FrameError(f"frame length {length} exceeds {limit}")
    return int(length)


def decode_body(body: bytes) -> Frame:
    try:
        message = json.loads(body)
    except ValueError as exc:
        raise FrameError(f"frame body is not JSON: {exc}") from exc
    if not isinstance(message, dict):
        raise FrameError(f"frame body is a {type(message).__name__}, not an object")
    return message


class FrameReader:
    """Reads frames from a blocking socket, a whole buffer at a time.

    One ``recv`` usually brings a whole frame (header and body), so a call costs one
    system call instead of two. ``limit`` caps a frame's body: a peer that is not trusted
    (the agent's Python worker) cannot make us buffer more than that.
    """

    def __init__(self, sock: socket.socket, limit: int = MAX_FRAME_BYTES) -> None:
        self.sock = sock
        self.limit = limit
        self._buf = bytearray()

    def _take(self) -> Frame | None:
        if len(self._buf) < HEADER.size:
            return None
        end = HEADER.size + body_length(self._buf[: HEADER.size], self.limit)
        if len(self._buf) < end:
            return None
        body = bytes(self._buf[HEADER.size : end])
        del self._buf[:end]
        return decode_body(body)

    def has_frame(self) -> bool:
        """Whether a whole frame is already buffered (a peer that sent two at once)."""
        if len(self._buf) < HEADER.size:
            return False
        return len(self._buf) >= HEADER.size + body_length(self._buf[: HEADER.size], self.limit)

    def read(self) -> Frame | None:
        """The next frame; ``None`` when the peer closed cleanly between frames."""
        while (message := self._take()) is None:
            chunk = self.sock.recv(READ_SIZE)
            if not chunk:
                if self._buf:
                    raise FrameError(f"peer closed inside a frame ({len(self._buf)} bytes read)")
                return None
            self._buf += chunk
        return message


def send_frame(sock: socket.socket, message: Mapping[str, Any]) -> None:
    sock.sendall(encode_frame(message))
