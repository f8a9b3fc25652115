"""Reading a box's answer to a command as data, whoever wrote it.

Shell results come from the executor (trusted); Python results come straight from the
Python worker, which is the agent's own process: agent code can patch it, and so write
any reply it likes. A worker's reply therefore says only what the agent's code printed
and how it exited, within the box's output cap; whether the call ran out of memory is
the executor's word alone (``oom`` is ignored from the worker), and a reply that does
not parse as a result is a ``BadReply``, which the sandbox treats like a lost call (it
asks the executor how the worker ended).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .agent.framing import Frame

NUMBERS = (int, float)


class BadReply(Exception):
    """A reply that is not a well-formed result (from an untrusted or broken peer)."""


class CallReply(NamedTuple):  # a tuple: cheap to build on every Python call's path
    stdout: str
    stderr: str
    exit_code: int
    truncated: bool
    duration_s: float
    timed_out: bool
    oom: bool


def worker_frame_limit(cap: int) -> int:
    """The largest honest worker reply: two capped streams, each character JSON-escaped to
    at most 12 bytes (a surrogate pair), plus room for the other fields."""
    return 2 * 12 * cap + (1 << 16)


def read_reply(reply: Frame, *, cap: int, trusted: bool) -> CallReply:
    """A command's result from ``reply``; ``BadReply`` unless every field has its type.

    On every Python call's path, so it checks exact types (what JSON gives) in one
    expression: a bool is never taken for an exit code.
    """
    get = reply.get
    stdout, stderr, exit_code = get("stdout"), get("stderr"), get("exit_code")
    truncated, timed_out, duration = get("truncated"), get("timed_out"), get("duration_s")
    if (
        stdout.__class__ is not str
        or stderr.__class__ is not str
        or exit_code.__class__ is not int
        or truncated.__class__ is not bool
        or timed_out.__class__ is not bool
        or duration.__class__ not in NUMBERS
    ):
        raise BadReply(f"a field of the reply has the wrong type: {reply!r:.200}")
    if not 0.0 <= duration < math.inf:  # also false for NaN
        raise BadReply(f"the reply's duration_s is {duration}")
    if len(stdout) > cap or len(stderr) > cap:
        stdout, stderr, truncated = stdout[:cap], stderr[:cap], True
    oom = trusted and get("oom") is True
    return CallReply(stdout, stderr, exit_code, truncated, float(duration), timed_out, oom)
