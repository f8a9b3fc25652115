"""The cluster's pure rules: routing, the budget split, the session table, versions."""

from __future__ import annotations

import itertools

import pytest

from rollgym.cluster.routing import (
    GroupTable,
    Owner,
    SessionTable,
    least_loaded,
    split_budget,
    split_seeds,
)
from rollgym.cluster.versions import Applied, Refused, Unreachable, catch_up_steps, settle
from rollgym.contract.staleness import window_capacity
from rollgym.contract.wire import ErrorBody


def test_least_loaded_takes_the_lowest_and_equal_servers_take_turns() -> None:
    loads = {"s0": 2, "s1": 0, "s2": 0}
    assert [least_loaded(loads, turn) for turn in range(4)] == ["s1", "s2", "s1", "s2"]
    assert least_loaded({"s0": 5}) == "s0"


@pytest.mark.parametrize(("total", "servers"), itertools.product(range(1, 20), range(1, 6)))
def test_budget_shares_add_up_to_one_window_for_the_whole_cluster(total: int, servers: int) -> None:
    names = [f"s{i}" for i in range(servers)]
    shares = split_budget(total, names)
    assert sum(shares.values()) == total
    assert max(shares.values()) - min(shares.values()) <= 1
    # each server's gate holds (max_staleness + 1) x share: together, exactly one window
    capacity = sum((1 + 1) * share for share in shares.values())
    assert capacity == window_capacity(max_staleness=1, batch_groups=total)


def test_budget_split_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        split_budget(0, ["s0"])
    with pytest.raises(ValueError):
        split_budget(4, [])


def test_seeds_are_dealt_out_without_overlap() -> None:
    shares = split_budget(3, ["s0", "s1", "s2"])
    dealt = split_seeds(list(range(10)), shares)
    seen = [seed for seeds in dealt.values() for seed in seeds or []]
    assert sorted(seen) == list(range(10))
    assert split_seeds(None, shares) == {"s0": None, "s1": None, "s2": None}
    assert split_seeds([7], shares) == {"s0": [7], "s1": [7], "s2": [7]}


def test_session_table_counts_open_sessions_and_remembers_lost_ones() -> None:
    table = SessionTable(max_lost=2)
    for i in range(3):
        table.bind(f"a{i}", "s0")
    table.bind("b", "s1")
    assert (table.open_on("s0"), table.open_on("s1")) == (3, 1)
    table.drop("a0")
    assert table.open_on("s0") == 2
    assert table.lose("s0") == 2
    assert table.open_on("s0") == 0
    place = table.find("a1")
    assert place is not None and place.owner is Owner.LOST
    table.bind("a1", "s1")  # a re-bound id counts once, on its new server
    assert table.open_on("s1") == 2


def test_group_table_keeps_a_lost_group_until_all_its_members_came() -> None:
    table = GroupTable()
    table.reserve("g", "s0", size=3)
    table.arrived("g")
    assert table.lose("s0") == 1 and table.lose("s0") == 0  # lost once
    table.arrived("g")
    place = table.find("g")
    assert place is not None and (place.owner, place.came) == (Owner.LOST, 2)
    table.arrived("g")
    assert table.find("g") is None
    table.arrived("g")  # a member past G: nothing to count
    assert table.find("g") is None


def test_group_table_forgets_its_oldest_group_past_its_bound() -> None:
    table = GroupTable(max_groups=2)
    for name in ("a", "b", "c"):
        table.reserve(name, "s0", size=2)
    assert [table.find(n) is not None for n in ("a", "b", "c")] == [False, True, True]


def test_an_update_counts_when_every_server_applied_it() -> None:
    settled = settle(3, {"s0": Applied(4), "s1": Applied(4)})
    assert (settled.version, settled.applied, settled.evicted) == (4, ("s0", "s1"), ())


def test_a_server_that_failed_or_answered_another_version_leaves_the_rotation() -> None:
    refused = Refused(409, ErrorBody(error="version_mismatch", message="at 2"))
    settled = settle(3, {"s0": Applied(4), "s1": Unreachable("reset"), "s2": refused})
    assert (settled.version, settled.evicted) == (4, ("s1", "s2"))
    assert settle(3, {"s0": Applied(4), "s1": Applied(5)}).evicted == ("s1",)


def test_weights_every_server_refused_are_the_callers_error() -> None:
    refused = Refused(400, ErrorBody(error="bad_weights", message="missing tensors"))
    settled = settle(3, {"s0": refused, "s1": refused})
    assert (settled.version, settled.evicted, settled.refusal) == (3, (), refused)


def test_when_no_server_applied_it_the_version_stays() -> None:
    broken = Refused(503, ErrorBody(error="engine_failure", message="x"))
    settled = settle(3, {"s0": Unreachable("x"), "s1": broken})
    assert (settled.version, settled.applied, settled.evicted) == (3, (), ("s0", "s1"))


def test_catching_up_takes_one_step_per_version_behind() -> None:
    assert [catch_up_steps(v, 3) for v in range(4)] == [3, 2, 1, 0]
    with pytest.raises(ValueError, match="ahead"):
        catch_up_steps(4, 3)
