"""The time left in progress lines, the one format every long step uses (the warm start's SFT,
evaluations, exports): extrapolated from the rate so far."""

from __future__ import annotations


def time_left(done: int, total: int, elapsed_s: float) -> str:
    """The rate so far, extrapolated to what is left.

    >>> time_left(30, 90, elapsed_s=65.0)
    'about 2m10s left'
    """
    left = round(elapsed_s / max(done, 1) * (total - done))
    return f"about {left // 60}m{left % 60:02d}s left"
