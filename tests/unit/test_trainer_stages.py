"""Stage accounting: spans rebuilt from turn durations, union lengths, shares."""

from __future__ import annotations

import pytest
from trainer_fakes import make_trajectory

from rollgym.trainer.stages import StageTimeline, covered, episode_spans


def test_covered_is_the_length_of_the_union_inside_the_window() -> None:
    spans = [(0.0, 2.0), (1.0, 3.0), (5.0, 6.0), (9.0, 20.0)]
    assert covered(spans, 0.0, 10.0) == pytest.approx(3.0 + 1.0 + 1.0)
    assert covered(spans, 2.5, 5.5) == pytest.approx(0.5 + 0.5)
    assert covered([], 0.0, 1.0) == 0.0


def test_episode_spans_walk_back_from_the_episode_end() -> None:
    trajectory = make_trajectory(group_id="g", version=0, first_turn=[1, 2], created_at=100.0)
    # two turns, each: queue 0.001, model 0.02, env 0.005 (see the fake)
    spans = episode_spans(trajectory, pulled_at=104.0)
    assert spans["environment"][0] == pytest.approx((99.995, 100.0))
    assert spans["sampling"][0] == pytest.approx((99.975, 99.995))
    assert spans["environment"][1] == pytest.approx((99.969, 99.974))
    assert spans["buffer"] == [(100.0, 104.0)]


def test_busy_plus_waiting_is_the_window_for_every_stage() -> None:
    timeline = StageTimeline()
    timeline.add("training", 1.0, 4.0)
    timeline.add_episode(
        make_trajectory(group_id="g", version=0, first_turn=[1], created_at=2.0), pulled_at=3.0
    )
    shares = timeline.shares(0.0, 10.0)
    for share in shares.values():
        assert share.busy_s + share.waiting_s == pytest.approx(10.0)
    assert shares["training"].busy_share == pytest.approx(0.3)
    assert shares["buffer"].busy_s == pytest.approx(1.0)
