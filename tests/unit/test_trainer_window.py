"""The staleness window and the pull checks (pure functions, no I/O)."""

from __future__ import annotations

import random

from trainer_fakes import make_trajectory, random_group

from rollgym.contract.staleness import is_fresh, staleness
from rollgym.contract.wire import Trajectory, TrajectoryGroup
from rollgym.trainer.window import mask_stale_turns, select_groups


def began_old(group_id: str, first: int, second: int) -> Trajectory:
    """Three model tokens at version ``first``, the env's reply, two at ``second``."""
    trajectory = make_trajectory(
        group_id=group_id, version=first, first_turn=[7, 8, 9], second_turn=[5, 2]
    )
    turns = [trajectory.turns[0], trajectory.turns[1].model_copy(update={"policy_version": second})]
    return trajectory.model_copy(update={"turns": turns, "max_version": second})


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


def test_by_turn_a_group_is_as_new_as_its_newest_turn() -> None:
    group = TrajectoryGroup(
        group_id="g", env_id="e", trajectories=[began_old("g", 3, 5), began_old("g", 4, 5)]
    )
    window = dict(trainer_version=5, max_staleness=1, group_size=2, already_trained=set())
    assert select_groups([group], **window).stale == [group]
    assert select_groups([group], **window, unit="turn").fresh == [group]
    future = TrajectoryGroup(group_id="f", env_id="e", trajectories=[began_old("f", 5, 6)])
    assert select_groups([future], **window, unit="turn").stale == [future]


def test_masking_takes_exactly_the_stale_turns_tokens_out_of_the_loss() -> None:
    old, fresh = began_old("g", 3, 5), began_old("g", 4, 5)
    group = TrajectoryGroup(group_id="g", env_id="e", trajectories=[old, fresh])
    masked = mask_stale_turns(group, trainer_version=5, max_staleness=1)
    env = [0] * (len(old.loss_mask) - 5)
    assert masked.group.trajectories[0].loss_mask == [0, 0, 0, *env, 1, 1]
    assert masked.group.trajectories[1] == fresh  # every turn in the window: unchanged
    assert masked.turns == 1
    # everything else of the episode stays: tokens, behaviour logprobs, the return
    kept = masked.group.trajectories[0]
    assert (kept.completion_ids, kept.logprobs, kept.reward) == (
        old.completion_ids,
        old.logprobs,
        old.reward,
    )


def test_a_trajectory_whose_turns_do_not_account_for_its_tokens_is_masked_whole() -> None:
    old = began_old("g", 3, 5)
    odd = old.model_copy(
        update={"turns": [old.turns[0].model_copy(update={"completion_tokens": 1}), old.turns[1]]}
    )
    group = TrajectoryGroup(group_id="g", env_id="e", trajectories=[odd])
    masked = mask_stale_turns(group, trainer_version=5, max_staleness=1)
    assert sum(masked.group.trajectories[0].loss_mask) == 0
