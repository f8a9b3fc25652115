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

from .agent.framing import Message


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


def read_reply(reply: Message, *, cap: int, trusted: bool) -> CallReply:
    """A command's result from ``reply``; ``BadReply`` unless every field has its type."""
    stdout, stderr = _text(reply, "stdout"), _text(reply, "stderr")
    truncated = _flag(reply, "truncated")
    duration = reply.get("duration_s")
    if isinstance(duration, bool) or not isinstance(duration, (int, float)):
        raise BadReply(f"the reply's duration_s is {duration!r}")
    if not math.isfinite(duration) or duration < 0:
        raise BadReply(f"the reply's duration_s is {duration}")
    exit_code = reply.get("exit_code")
    if isinstance(exit_code, bool) or not isinstance(exit_code, int):
        raise BadReply(f"the reply's exit_code is {exit_code!r}")
    if len(stdout) > cap or len(stderr) > cap:
        stdout, stderr, truncated = stdout[:cap], stderr[:cap], True
    return CallReply(
        stdout=stdout,
        stderr=stderr,
        exit_code=exit_code,
        truncated=truncated,
        duration_s=float(duration),
        timed_out=_flag(reply, "timed_out"),
        oom=_flag(reply, "oom") if trusted else False,
    )


def _text(reply: Message, name: str) -> str:
    value = reply.get(name)
    if not isinstance(value, str):
        raise BadReply(f"the reply's {name} is {type(value).__name__}, not text")
    return value


def _flag(reply: Message, name: str) -> bool:
    value = reply.get(name)
    if not isinstance(value, bool):
        raise BadReply(f"the reply's {name} is {type(value).__name__}, not a bool")
    return value
