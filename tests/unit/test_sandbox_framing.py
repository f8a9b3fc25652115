"""The executor's wire format: length-prefixed JSON frames."""

from __future__ import annotations

import socket
import struct

import pytest

from rollgym.sandboxes.agent.framing import (
    HEADER,
    MAX_FRAME_BYTES,
    FrameError,
    FrameReader,
    decode_body,
    encode_frame,
    send_frame,
)


def test_a_frame_is_a_length_then_a_json_object() -> None:
    frame = encode_frame({"op": "ping", "n": 1})
    (length,) = HEADER.unpack(frame[: HEADER.size])
    assert length == len(frame) - HEADER.size
    assert decode_body(frame[HEADER.size :]) == {"op": "ping", "n": 1}


@pytest.mark.parametrize("body", [b"[1, 2]", b"not json", b'"text"'])
def test_a_body_must_be_a_json_object(body: bytes) -> None:
    with pytest.raises(FrameError):
        decode_body(body)


def test_reader_splits_frames_that_arrive_together_and_in_pieces() -> None:
    a, b = socket.socketpair()
    with a, b:
        reader = FrameReader(b)
        first, second = encode_frame({"i": 1}), encode_frame({"i": 2, "s": "é" * 100})
        a.sendall(first + second[:5])
        assert reader.read() == {"i": 1}
        assert not reader.has_frame()
        a.sendall(second[5:])
        assert reader.read() == {"i": 2, "s": "é" * 100}
        send_frame(a, {"i": 3})
        a.close()
        assert reader.read() == {"i": 3}
        assert reader.read() is None  # a clean end between frames


def test_reader_reports_a_peer_that_hangs_up_inside_a_frame() -> None:
    a, b = socket.socketpair()
    with a, b:
        a.sendall(encode_frame({"cut": True})[:-2])
        a.close()
        with pytest.raises(FrameError, match="inside a frame"):
            FrameReader(b).read()


def test_reader_refuses_an_absurd_length() -> None:
    a, b = socket.socketpair()
    with a, b:
        a.sendall(struct.pack("!I", MAX_FRAME_BYTES + 1))
        with pytest.raises(FrameError, match="exceeds"):
            FrameReader(b).read()
