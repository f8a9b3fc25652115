"""The staleness window: which samples a trainer may still learn from, and how many to make.

A trainer whose weights are policy version ``V`` trains on a sample (a trajectory, or a
group: its oldest turn counts) only if it was sampled recently enough::

    staleness = V - min_version                  # versions between sampling and training
    fresh     = 0 <= staleness <= max_staleness  # max_staleness 0: on-policy (synchronous)

**Unit.** By default a whole group counts as old as its oldest turn (``"group"``). With
``"turn"``, a group whose first turns fell out of the window while its episodes ran on
(under newer weights, as an asynchronous run's long episodes do) is kept: it counts as new
as its newest turn (``window_version``), and the trainer masks its turns that are out of the
window from the loss (their tokens stay in the context; the episode's return still scores
the group). What a dropped group cost to sample is kept instead of thrown away: the
"partial rollouts" of Kimi k1.5 and AReaL's interruptible generation, at turn granularity.

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

from typing import Literal, TypeVar

StalenessUnit = Literal["group", "turn"]
V = TypeVar("V")


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


def window_version(unit: StalenessUnit, min_version: V, max_version: V) -> V:
    """The version a group (or trajectory) spanning ``min_version..max_version`` is judged
    by: its oldest turn's for ``"group"``, its newest turn's for ``"turn"``. (The buffer
    passes its SQL columns' names and gets the one its query compares.)

    >>> window_version("group", 3, 6), window_version("turn", 3, 6)
    (3, 6)
    """
    return min_version if unit == "group" else max_version


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
