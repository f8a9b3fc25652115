"""The runner's pure cores: admission from the staleness window, seed order, group filter."""

from __future__ import annotations

import itertools
import random

import pytest

from rollgym.server.rollout.admission import AdmissionGate
from rollgym.server.rollout.filtering import GroupFilter, Verdict
from rollgym.server.rollout.ordering import SeedSchedule


@pytest.mark.parametrize(("staleness", "batch"), [(0, 1), (0, 4), (1, 4), (3, 2)])
def test_gate_never_lets_in_flight_plus_buffered_exceed_the_window(staleness, batch) -> None:
    gate = AdmissionGate(max_staleness=staleness, batch_groups=batch)
    assert gate.capacity == (staleness + 1) * batch
    for in_flight, buffered in itertools.product(range(12), range(12)):
        room = gate.room(in_flight, buffered)
        if in_flight + buffered >= gate.capacity:
            assert room == 0
        else:
            assert in_flight + buffered + room == gate.capacity
        assert gate.admits(in_flight, buffered) == (room > 0)


def test_oversampling_runs_more_groups_in_flight_by_its_factor() -> None:
    gate = AdmissionGate(max_staleness=1, batch_groups=4, oversample=1.5)
    assert gate.room(in_flight=0, buffered=0) == 12  # 1.5 x 8
    assert gate.room(in_flight=0, buffered=8) == 0  # buffered work counts in full
    assert gate.room(in_flight=6, buffered=4) == 0  # (8 - 4) x 1.5 = 6 may run


def test_gate_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="oversample"):
        AdmissionGate(max_staleness=0, batch_groups=1, oversample=0.5)
    with pytest.raises(ValueError, match="batch_groups"):
        AdmissionGate(max_staleness=0, batch_groups=0)


def test_random_order_visits_every_seed_once_per_pass() -> None:
    schedule = SeedSchedule([3, 1, 4, 5, 9], "random", random.Random(1))
    first, second = ([schedule.next() for _ in range(5)] for _ in range(2))
    assert sorted(first) == sorted(second) == [1, 3, 4, 5, 9]


def test_length_grouping_runs_unmeasured_seeds_first_then_by_length() -> None:
    schedule = SeedSchedule([1, 2, 3, 4], "length_grouped", random.Random(0))
    schedule.observe(1, 50.0)
    schedule.observe(3, 10.0)
    order = [schedule.next() for _ in range(4)]
    assert set(order[:2]) == {2, 4}
    assert order[2:] == [3, 1]


def test_alternate_interleaves_length_grouped_and_random_passes() -> None:
    seeds = list(range(40))
    schedule = SeedSchedule(seeds, "alternate", random.Random(0))
    for seed in seeds:
        schedule.observe(seed, float(seed))
    grouped = [schedule.next() for _ in seeds]
    shuffled = [schedule.next() for _ in seeds]
    again = [schedule.next() for _ in seeds]
    assert grouped == seeds == again
    assert sorted(shuffled) == seeds and shuffled != seeds


def test_without_a_seed_list_seeds_count_up() -> None:
    schedule = SeedSchedule(None, "length_grouped", random.Random(0))
    assert [schedule.next() for _ in range(4)] == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="empty"):
        SeedSchedule([], "random", random.Random(0))


def test_filter_drops_zero_variance_but_keeps_negative_samples() -> None:
    keep = GroupFilter(group_size=4)
    assert keep.verdict([-1.0, -1.0, -0.5, -1.0]) is Verdict.KEEP
    assert keep.verdict([-1.0, -1.0, -1.0, -1.0]) is Verdict.ZERO_VARIANCE
    assert keep.verdict([0.0, 0.0, 0.0, 0.0]) is Verdict.ZERO_VARIANCE
    assert keep.verdict([1.0]) is Verdict.TOO_FEW_VALID
    assert GroupFilter(group_size=4, drop_zero_variance=False).verdict([0.0, 0.0]) is Verdict.KEEP
    assert GroupFilter(group_size=1).verdict([0.0]) is Verdict.KEEP
