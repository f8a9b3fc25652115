"""CPU work of a request handler: on the event loop when it is short, in a thread when not.

A hop to a worker thread and back costs about 0.1 ms on the 2-core development machine
(the thread's wake-up, then the loop's; ``bench.http``'s profile), more than decoding a
short answer takes (about 0.2 us a token, 2 us with per-token logprobs). So work on at
most ``INLINE_TOKENS`` tokens runs on the loop, at most about 0.15 ms, and anything longer
goes to a thread, so that no request holds the loop for long.

    text = await by_size(len(token_ids), codec.decode, token_ids)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import ParamSpec, TypeVar

INLINE_TOKENS = 64

P = ParamSpec("P")
T = TypeVar("T")


async def by_size(tokens: int, work: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``work(*args, **kwargs)`` on the loop when it handles at most ``INLINE_TOKENS``
    tokens, in a worker thread otherwise."""
    if tokens <= INLINE_TOKENS:
        return work(*args, **kwargs)
    return await asyncio.to_thread(work, *args, **kwargs)
