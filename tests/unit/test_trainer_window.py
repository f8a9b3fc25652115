"""The staleness window and the pull checks (pure functions, no I/O)."""

from __future__ import annotations

import random

from trainer_fakes import make_trajectory, random_group

from rollgym.contract.staleness import is_fresh, staleness
from rollgym.contract.wire import TrajectoryGroup
from rollgym.trainer.window import select_groups


def test_window_rule_keeps_exactly_max_staleness_versions() -> None:
    assert staleness(trainer_version=7, min_version=5) == 2
    assert is_fresh(7, 5, max_staleness=2)
    assert not is_fresh(7, 4, max_staleness=2)
    # synchronous mode takes only samples from the trainer's own version
    assert is_fresh(7, 7, max_staleness=0)
    assert not is_fresh(7, 6, max_staleness=0)
    # a version from the future: the server's numbering restarted under the trainer
    assert not is_fresh(2, 9, max_staleness=3)


def test_a_group_is_as_old_as_its_oldest_turn() -> None:
    group = random_group(5, 2, random.Random(0))
    old = make_trajectory(group_id=group.group_id, version=3, first_turn=[9, 9])
    mixed = TrajectoryGroup(
        group_id=group.group_id, env_id="e", trajectories=[group.trajectories[0], old]
    )
    selection = select_groups(
        [mixed], trainer_version=5, max_staleness=1, group_size=2, already_trained=set()
    )
    assert selection.stale == [mixed] and selection.fresh == []


def test_select_groups_sorts_every_group_into_one_bucket() -> None:
    rng = random.Random(1)
    fresh = random_group(4, 4, rng)
    stale = random_group(1, 4, rng)
    seen = random_group(4, 4, rng)
    short = random_group(4, 3, rng)  # the server kept 3 valid of 4: trainable, padded later
    big = random_group(4, 5, rng)
    empty = random_group(4, 4, rng)
    empty.trajectories[0].completion_ids.clear()
    empty.trajectories[0].logprobs.clear()
    empty.trajectories[0].loss_mask.clear()
    selection = select_groups(
        [fresh, stale, seen, short, big, empty],
        trainer_version=4,
        max_staleness=2,
        group_size=4,
        already_trained={seen.group_id},
    )
    assert selection.fresh == [fresh, short]
    assert selection.stale == [stale]
    assert selection.already_trained == [seen]
    assert selection.malformed == [big, empty]
    assert len(selection.dropped) == 4
