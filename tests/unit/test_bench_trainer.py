"""bench.trainer's time to quality: a run's final success (its last points pooled), when a
curve reaches a level (the mean of its last points), each mode's share of sync's time, and
issue 43's verdict. The real twin is the benchmark itself (``python -m bench.trainer``),
whose curves come from real runs against a real server."""

from __future__ import annotations

import pytest

from bench.trainer import (
    CurvePoint,
    Mode,
    final_success,
    parse_modes,
    shares_of_sync,
    time_to,
    verdict_lines,
)
from rollgym.trainer.evaluate import SuccessRate, wilson_interval

pytestmark = pytest.mark.unit


def rate(percent: int) -> SuccessRate:
    low, high = wilson_interval(percent * 2, 200)
    return SuccessRate(percent * 2, 200, low, high, 0.0)


def row(mode: str, points: list[tuple[float, int]]) -> dict:
    """A mode's curve from (seconds, percent) points, one every 10 steps."""
    curve = [CurvePoint(10 * i, at_s, rate(percent)) for i, (at_s, percent) in enumerate(points)]
    return {"mode": mode, "curve": curve, "success": final_success(curve)}


def test_the_final_success_pools_the_last_three_points() -> None:
    final = final_success(row("sync", [(0, 10), (1, 50), (2, 60), (3, 70)])["curve"])
    assert (final.successes, final.episodes) == (360, 600)
    assert final.low < 0.6 < final.high


def test_one_lucky_point_does_not_reach_a_level() -> None:
    curve = row("sync", [(0, 40), (60, 70), (120, 40), (180, 60), (240, 60), (300, 61)])["curve"]
    assert time_to(curve, 0.70) is None  # one point of 70%, never three averaging it
    assert time_to(curve, 0.55) == 180  # (70 + 40 + 60) / 3
    assert time_to(curve, 0.60) == 300


def test_shares_are_each_modes_time_over_syncs_own() -> None:
    sync = row("sync", [(0, 40), (200, 60), (400, 70), (600, 70), (800, 70)])
    fast = row("async-2", [(0, 40), (100, 70), (150, 70), (200, 70)])
    stuck = row("async-4", [(0, 40), (100, 50), (200, 50), (300, 50)])
    shares = shares_of_sync([[sync, fast, stuck]])
    assert shares == {"sync": [1.0], "async-2": [0.25], "async-4": [None]}


def test_the_verdict_needs_every_seed() -> None:
    def seed(async_points: list[tuple[float, int]]) -> list[dict]:
        sync = row("sync", [(0, 40), (200, 70), (400, 70), (600, 70)])
        return [sync, row("async-2", async_points)]

    quick = seed([(0, 40), (100, 72), (150, 72), (200, 72)])  # reached at 200 s of 400
    slow = seed([(0, 40), (100, 60), (200, 72), (300, 72), (350, 72)])  # at 350 s
    one = verdict_lines([quick], shares_of_sync([quick]))
    assert one[0].startswith("best asynchronous mode: async-2")
    assert one[1].startswith("  met ") and "1 of 1 seeds" in one[1]
    assert one[2].startswith("  met ")
    both = verdict_lines([quick, slow], shares_of_sync([quick, slow]))
    assert both[1].startswith("  NOT MET") and "1 of 2 seeds" in both[1]
    assert both[2].startswith("  met ") and "2 of 2 seeds" in both[2]


def test_a_final_success_below_syncs_interval_fails_the_second_target() -> None:
    sync = row("sync", [(0, 40), (200, 70), (400, 70), (600, 70)])
    peaked = row("async-4", [(0, 40), (50, 72), (100, 72), (150, 72), (200, 55), (250, 55)])
    runs = [[sync, peaked]]
    lines = verdict_lines(runs, shares_of_sync(runs))
    assert lines[1].startswith("  met ")
    assert lines[2].startswith("  NOT MET") and "0 of 1 seeds" in lines[2]


def test_the_best_mode_is_the_one_that_meets_the_targets_in_the_most_seeds() -> None:
    def seed(first: int, second: int) -> list[dict]:
        sync = row("sync", [(0, 40), (200, 70), (400, 70), (600, 70)])
        soon = row("async-2", [(0, 40), (50, 72), (first, 72), (first + 10, 72)])
        steady = row("async-4", [(0, 40), (100, 72), (second, 72), (second + 10, 72)])
        return [sync, soon, steady]

    runs = [seed(60, 150), seed(300, 150)]  # async-2: sooner in one seed, too late in the other
    lines = verdict_lines(runs, shares_of_sync(runs))
    assert lines[0].startswith("best asynchronous mode: async-4")
    assert lines[1].startswith("  met ") and "2 of 2 seeds" in lines[1]


def test_modes_name_their_staleness_and_the_corrections_they_add() -> None:
    modes = parse_modes("sync,async-2,async-2+mask,async-4+turn+mask")
    assert modes == [
        Mode("sync", 0),
        Mode("async-2", 2),
        Mode("async-2+mask", 2, token_mask=True),
        Mode("async-4+turn+mask", 4, token_mask=True, by_turn=True),
    ]


@pytest.mark.parametrize(
    "spec",
    [
        "async-2,sync",
        "sync",
        "sync,async-2,async-2",
        "sync,async-x",
        "sync,async-2+fast",
        "sync+turn,async-2",
        "sync,async-2+mask+mask",
    ],
)
def test_modes_that_cannot_be_compared_are_refused(spec: str) -> None:
    with pytest.raises(ValueError):
        parse_modes(spec)
