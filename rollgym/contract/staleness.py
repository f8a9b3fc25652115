"""The staleness window: which samples a trainer may still learn from, and how many to make.

A trainer whose weights are policy version ``V`` trains on a sample (a trajectory, or a
group: its oldest turn counts) only if it was sampled recently enough::

    staleness = V - min_version                  # versions between sampling and training
    fresh     = 0 <= staleness <= max_staleness  # max_staleness 0: on-policy (synchronous)

A negative staleness (a sample "from the future") only happens when the server's version
numbering restarted under the trainer; such a sample cannot be placed on the run's policy
lineage, so it is not fresh either.

Since the trainer consumes ``batch`` groups per version, at most ``(max_staleness + 1) x
batch`` groups can still be trained on when they are made: that is the window's capacity,
the budget the sampler admits new work against.

Every part that applies the rule (the buffer when it answers a pull, the sampler's
admission gate, the dashboard's waiting times, the trainer's own check) calls these
functions; nothing else writes the formula.
"""

from __future__ import annotations


def staleness(trainer_version: int, min_version: int) -> int:
    """Policy versions the trainer has moved on since the sample's oldest turn.

    >>> staleness(trainer_version=7, min_version=5)
    2
    """
    return trainer_version - min_version


def is_fresh(trainer_version: int, min_version: int, max_staleness: int) -> bool:
    """The window rule: ``0 <= trainer_version - min_version <= max_staleness``.

    >>> is_fresh(7, 5, max_staleness=2), is_fresh(7, 4, max_staleness=2), is_fresh(7, 8, 2)
    (True, False, False)
    """
    return 0 <= staleness(trainer_version, min_version) <= max_staleness


def oldest_fresh_version(trainer_version: int, max_staleness: int) -> int:
    """The lowest ``min_version`` still fresh for a trainer at ``trainer_version``.

    >>> oldest_fresh_version(7, max_staleness=2)
    5
    """
    return trainer_version - max_staleness


def window_capacity(max_staleness: int, batch_groups: int) -> int:
    """``(max_staleness + 1) x batch``: groups that can still be trained on when made.

    >>> window_capacity(max_staleness=1, batch_groups=4)
    8
    """
    if max_staleness < 0 or batch_groups < 1:
        raise ValueError(
            f"the window needs max_staleness >= 0 and batch_groups >= 1, "
            f"got {max_staleness} and {batch_groups}"
        )
    return (max_staleness + 1) * batch_groups
