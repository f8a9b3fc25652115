"""Length-prefixed JSON frames: the wire format between the host and the executor.

A frame is a 4-byte big-endian body length, then a UTF-8 JSON object. Bytes (file
contents) travel base64-encoded inside the JSON. A peer that closes between frames is a
clean end (``recv_frame`` returns ``None``); a close inside a frame is a ``FrameError``.
"""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Mapping
from typing import Any

HEADER = struct.Struct("!I")
MAX_FRAME_BYTES = 1 << 28  # 256 MiB: a guard against a corrupt length, not a quota

Message = dict[str, Any]


class FrameError(Exception):
    """A malformed frame, or a peer that hung up inside one."""


def encode_frame(message: Mapping[str, Any]) -> bytes:
    body = json.dumps(message, separators=(",", ":")).encode()
    if len(body) > MAX_FRAME_BYTES:
        raise FrameError(f"frame of {len(body)} bytes exceeds {MAX_FRAME_BYTES}")
    return HEADER.pack(len(body)) + body


def body_length(header: bytes) -> int:
    (length,) = HEADER.unpack(header)
    if length > MAX_FRAME_BYTES:
        raise FrameError(f"frame length {length} exceeds {MAX_FRAME_BYTES}")
    return int(length)


def decode_body(body: bytes) -> Message:
    try:
        message = json.loads(body)
    except ValueError as exc:
        raise FrameError(f"frame body is not JSON: {exc}") from exc
    if not isinstance(message, dict):
        raise FrameError(f"frame body is a {type(message).__name__}, not an object")
    return message


def _recv_exact(sock: socket.socket, size: int, *, at_boundary: bool) -> bytes | None:
    buf = bytearray()
    while len(buf) < size:
        chunk = sock.recv(size - len(buf))
        if not chunk:
            if at_boundary and not buf:
                return None
            raise FrameError(f"peer closed after {len(buf)} of {size} bytes")
        buf += chunk
    return bytes(buf)


def recv_frame(sock: socket.socket) -> Message | None:
    """Read one frame from a blocking socket; ``None`` when the peer closed cleanly."""
    header = _recv_exact(sock, HEADER.size, at_boundary=True)
    if header is None:
        return None
    body = _recv_exact(sock, body_length(header), at_boundary=False)
    assert body is not None
    return decode_body(body)


def send_frame(sock: socket.socket, message: Mapping[str, Any]) -> None:
    sock.sendall(encode_frame(message))
