"""The group feed (TRL's rollout_func): window, drops counted and released, starvation."""

from __future__ import annotations

import random

import pytest
from trainer_fakes import FakeServer, random_group

from rollgym.contract.wire import TrajectoryGroup
from rollgym.trainer.config import TrainerConfig
from rollgym.trainer.errors import StarvedError
from rollgym.trainer.feed import GroupFeed
from rollgym.trainer.ledger import DataLedger
from rollgym.trainer.progress import RunProgress


def _feed(fake: FakeServer, tmp_path, *, version: int, **config) -> GroupFeed:
    cfg = TrainerConfig(output_dir=tmp_path, group_size=4, groups_per_batch=2, **config)
    return GroupFeed(fake.client(), cfg, DataLedger(), RunProgress(), version=lambda: version)


def test_feed_returns_a_trl_batch_of_fresh_groups(tmp_path) -> None:
    fake = FakeServer(version=5)
    feed = _feed(fake, tmp_path, version=5, max_staleness=1)
    output = feed(["p"] * 8)
    assert len(output["completion_ids"]) == 8
    assert feed.ledger.groups_trained == 2
    assert feed.ledger.pending == fake.handed_out
    assert feed.progress._batch.rewards  # the step's rewards are being recorded


def test_stale_groups_are_dropped_and_counted_on_both_sides(tmp_path) -> None:
    rng = random.Random(0)
    fake = FakeServer(version=6, producer=None)
    fake.add(random_group(2, 4, rng), random_group(5, 4, rng), random_group(6, 4, rng))
    # The server drops what is stale for the version the trainer sent...
    feed = _feed(fake, tmp_path, version=6, max_staleness=1)
    groups = feed.next_groups(2)
    assert [g.min_version for g in groups] == [5, 6]
    assert feed.ledger.dropped.stale_server == 4

    # ...and the trainer drops what became stale after the request left (here: a server
    # that ignores the window), acks it so it is never re-delivered, and counts it.
    fake.add(random_group(1, 4, rng), random_group(6, 4, rng))
    original = fake._pull

    def windowless(request):
        return original(request.model_copy(update={"max_staleness": 10**6}))

    fake._pull = windowless  # type: ignore[method-assign]
    groups = feed.next_groups(1)
    assert [g.min_version for g in groups] == [6]
    assert feed.ledger.dropped.stale_trainer == 4
    assert fake.handed_out[-2] in fake.acked  # the stale one, released


def test_by_turn_a_group_that_began_before_the_window_trains_on_its_fresh_turns(
    tmp_path,
) -> None:
    rng = random.Random(3)
    old = random_group(2, 4, rng)  # two turns each at version 2; the second moved to 5
    began_old = TrajectoryGroup(
        group_id=old.group_id,
        env_id=old.env_id,
        trajectories=[
            t.model_copy(
                update={
                    "turns": [t.turns[0], t.turns[1].model_copy(update={"policy_version": 5})],
                    "max_version": 5,
                }
            )
            for t in old.trajectories
        ],
    )
    fake = FakeServer(version=6, producer=None)
    fake.add(began_old, random_group(1, 4, rng))
    feed = _feed(fake, tmp_path, version=6, max_staleness=1, staleness_unit="turn")
    batch = feed(["p"] * 4)
    assert fake.pull_requests[0].staleness_unit == "turn"
    assert batch["group_id"] == [began_old.group_id] * 4
    for sample, trajectory in zip(batch["env_mask"], began_old.trajectories, strict=True):
        first, second = (turn.completion_tokens for turn in trajectory.turns)
        model = [i for i, m in enumerate(trajectory.loss_mask) if m]
        assert [sample[i] for i in model] == [0] * first + [1] * second
    assert feed.ledger.dropped.stale_turns_masked == 4  # one turn of each of the 4 episodes
    assert feed.ledger.dropped.stale_server == 4  # the group with no fresh turn


def test_already_trained_groups_are_skipped_and_released(tmp_path) -> None:
    rng = random.Random(1)
    fake = FakeServer(version=1, producer=None)
    first, second = random_group(1, 4, rng), random_group(1, 4, rng)
    fake.add(first)
    feed = _feed(fake, tmp_path, version=1)
    feed.ledger.record_batch([first.group_id])  # trained before a crash, ack lost
    fake.add(second)
    assert feed.next_groups(1) == [second]
    assert feed.ledger.dropped.already_trained == 4
    assert first.group_id in fake.acked


def test_an_oversized_group_is_malformed_not_trained(tmp_path) -> None:
    rng = random.Random(2)
    fake = FakeServer(version=0, producer=None)
    fake.add(random_group(0, 5, rng), random_group(0, 4, rng))
    feed = _feed(fake, tmp_path, version=0)
    assert len(feed.next_groups(1)[0].trajectories) == 4
    assert feed.ledger.dropped.malformed == 5


def test_a_feed_with_nothing_to_pull_gives_up_after_the_stall_timeout(tmp_path) -> None:
    fake = FakeServer(producer=None)
    feed = _feed(fake, tmp_path, version=0, stall_timeout_s=0.05, pull_timeout_s=0.01)
    fake.dropped_zero_variance = 3
    with pytest.raises(StarvedError, match=r"filtered 3 groups .* rollout job"):
        feed.next_groups(1)
    assert fake.pull_requests  # it long-polled (as often as fit) before giving up
    assert all(r.num_groups == 1 and r.trainer_version == 0 for r in fake.pull_requests)
