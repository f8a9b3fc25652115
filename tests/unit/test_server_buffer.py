"""The trajectory buffer: durable, versioned, each group handed out once."""

from __future__ import annotations

import asyncio
import sqlite3
import time

import pytest

from rollgym.contract.wire import PullRequest, PullResponse, Trajectory, TrajectoryGroup
from rollgym.server.buffer.observers import BufferObserver
from rollgym.server.buffer.store import TrajectoryBuffer
from rollgym.server.config import BufferConfig
from rollgym.server.observability.metrics import ServerMetrics


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def group(
    group_id: str, version: int = 0, size: int = 2, newest: int | None = None
) -> TrajectoryGroup:
    """``size`` trajectories sampled at ``version`` (their last turn at ``newest``, if given)."""
    trajectories = [
        Trajectory(
            id=f"{group_id}-{i}",
            group_id=group_id,
            env_id="test/Scripted-v0",
            prompt_ids=[1, 2],
            completion_ids=[3, 4],
            logprobs=[-0.5, 0.0],
            loss_mask=[1, 0],
            reward=float(i),
            terminated=True,
            truncated=False,
            min_version=version,
            max_version=version if newest is None else newest,
            turns=[],
            created_at=time.time(),
        )
        for i in range(size)
    ]
    return TrajectoryGroup(group_id=group_id, env_id="test/Scripted-v0", trajectories=trajectories)


def pull(
    n: int, version: int = 0, staleness: int = 1, timeout: float = 0.0, unit: str = "group"
) -> PullRequest:
    return PullRequest(
        trainer_version=version,
        max_staleness=staleness,
        num_groups=n,
        timeout_s=timeout,
        staleness_unit=unit,
    )


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def buffer(tmp_path, clock):
    async with TrajectoryBuffer(
        tmp_path / "b.sqlite3", BufferConfig(lease_timeout_s=30), clock=clock
    ) as b:
        yield b


async def test_a_group_is_handed_out_once_and_never_again_after_its_ack(buffer) -> None:
    assert await buffer.put_group(group("g1"))
    assert await buffer.put_group(group("g2"))
    first, leased = await buffer.pull(pull(2), policy_version=0)
    assert [g.group_id for g in first.groups] == ["g1", "g2"]
    assert first.lease_id is not None and len(leased.waited_s) == 2
    assert buffer.depth.leased == 2 and buffer.depth.ready == 0
    again, _ = await buffer.pull(pull(2), policy_version=0)
    assert again.groups == [] and again.lease_id is None
    assert await buffer.ack(["g1", "g2"]) == 2
    assert await buffer.ack(["g1", "g2", "unknown"]) == 2  # idempotent
    assert buffer.depth.total == 0


async def test_a_group_id_is_stored_once(buffer) -> None:
    assert await buffer.put_group(group("g1"))
    assert not await buffer.put_group(group("g1"))
    response, _ = await buffer.pull(pull(4), policy_version=0)
    assert len(response.groups) == 1


async def test_an_unacked_lease_is_handed_out_again_after_the_timeout(buffer, clock) -> None:
    await buffer.put_group(group("g1"))
    first, _ = await buffer.pull(pull(1), policy_version=0)
    clock.now += 29
    assert (await buffer.pull(pull(1), policy_version=0))[0].groups == []
    clock.now += 2
    second, _ = await buffer.pull(pull(1), policy_version=0)
    assert [g.group_id for g in second.groups] == ["g1"]
    assert second.lease_id != first.lease_id


async def test_stale_groups_are_dropped_and_counted_never_delivered(buffer) -> None:
    await buffer.put_group(group("old", version=0, size=3))
    await buffer.put_group(group("new", version=2))
    response, _ = await buffer.pull(pull(4, version=3, staleness=1), policy_version=3)
    assert [g.group_id for g in response.groups] == ["new"]
    assert response.dropped_stale == 3 and buffer.dropped_stale == 3
    assert await buffer.ack(["old"]) == 0


async def test_by_turn_a_group_counts_as_new_as_its_newest_turn(buffer) -> None:
    await buffer.put_group(group("began-old", version=0, newest=2))
    await buffer.put_group(group("all-old", version=0, newest=1))
    await buffer.put_group(group("from-the-future", version=2, newest=4))
    response, _ = await buffer.pull(pull(4, version=3, staleness=1, unit="turn"), policy_version=3)
    assert [g.group_id for g in response.groups] == ["began-old", "from-the-future"]
    assert response.dropped_stale == 2  # all-old's two trajectories
    # the trainer drops what is from the future (trainer.window): the buffer cannot know


async def test_a_buffer_from_before_the_newest_turn_was_stored_opens_and_judges_by_the_oldest(
    tmp_path, clock
) -> None:
    path = tmp_path / "b.sqlite3"
    async with TrajectoryBuffer(path, BufferConfig(), clock=clock) as buffer:
        await buffer.put_group(group("old", version=0, newest=2))
    with sqlite3.connect(path) as db:  # the schema before the column existed
        db.execute("ALTER TABLE groups DROP COLUMN max_version")
    async with TrajectoryBuffer(path, BufferConfig(), clock=clock) as buffer:
        await buffer.put_group(group("new", version=0, newest=2))
        response, _ = await buffer.pull(
            pull(4, version=3, staleness=1, unit="turn"), policy_version=3
        )
    assert [g.group_id for g in response.groups] == ["new"]
    assert response.dropped_stale == 2


async def test_the_long_poll_answers_as_soon_as_enough_groups_arrive(buffer) -> None:
    waiting = asyncio.create_task(buffer.pull(pull(2, timeout=30), policy_version=0))
    await asyncio.sleep(0.05)
    await buffer.put_group(group("g1"))
    await asyncio.sleep(0.05)
    assert not waiting.done()  # one group is not a batch
    await buffer.put_group(group("g2"))
    response, _ = await asyncio.wait_for(waiting, 5)
    assert len(response.groups) == 2


async def test_the_long_poll_times_out_with_what_it_has(buffer) -> None:
    await buffer.put_group(group("g1"))
    response, _ = await buffer.pull(pull(3, timeout=0.2), policy_version=0)
    assert [g.group_id for g in response.groups] == ["g1"]


async def test_a_caller_that_went_away_gets_nothing_leased(buffer) -> None:
    await buffer.put_group(group("g1"))

    async def gone() -> bool:
        return True

    response, _ = await buffer.pull(pull(1), policy_version=0, abandoned=gone)
    assert response.groups == []
    assert buffer.depth.ready == 1


async def test_a_restart_keeps_every_group_and_every_ack(tmp_path, clock) -> None:
    path = tmp_path / "b.sqlite3"
    config = BufferConfig(lease_timeout_s=30)
    async with TrajectoryBuffer(path, config, clock=clock) as buffer:
        for name in ("a", "b", "c"):
            await buffer.put_group(group(name))
        response, _ = await buffer.pull(pull(2), policy_version=0)
        await buffer.ack([response.groups[0].group_id])  # "a" acked, "b" leased
    async with TrajectoryBuffer(path, config, clock=clock) as buffer:
        assert buffer.depth.ready == 1 and buffer.depth.leased == 1
        assert not await buffer.put_group(group("a"))  # no duplicate after the restart
        response, _ = await buffer.pull(pull(3), policy_version=0)
        assert [g.group_id for g in response.groups] == ["c"]
        assert await buffer.ack(["c"]) == 1
        clock.now += 31  # "b" was never acked: it comes back, whole
        response, _ = await buffer.pull(pull(3), policy_version=0)
        assert [g.group_id for g in response.groups] == ["b"]
        assert [t.id for t in response.groups[0].trajectories] == ["b-0", "b-1"]


async def test_invalid_trajectories_are_kept_aside(buffer) -> None:
    bad = group("g1").trajectories[0].model_copy(update={"valid": False, "invalid_reason": "x"})
    await buffer.put_invalid(bad)
    assert await buffer.count_invalid() == 1
    assert buffer.depth.total == 0


async def test_the_answer_splices_the_stored_groups_into_the_pull_response(buffer) -> None:
    for name in ("g1", "g2"):
        await buffer.put_group(group(name))
    response, leased = await buffer.pull(pull(2), policy_version=3)
    assert PullResponse.model_validate_json(leased.answer_bytes(response)) == response
    empty, nothing = await buffer.pull(pull(2), policy_version=3)
    assert PullResponse.model_validate_json(nothing.answer_bytes(empty)) == empty


async def test_an_unreadable_stored_group_is_dropped_and_never_blocks_the_others(buffer) -> None:
    await buffer.put_group(group("g1"))
    await buffer.put_group(group("g2"))
    await buffer._run(  # a payload from an older schema, or a bad disk
        lambda: buffer._conn().execute("UPDATE groups SET payload = '{}' WHERE group_id = 'g1'")
    )
    response, _ = await buffer.pull(pull(2), policy_version=0)
    assert [g.group_id for g in response.groups] == ["g2"]
    again, _ = await buffer.pull(pull(2), policy_version=0)
    assert again.groups == []  # g1 was dropped, not re-offered


class Watcher(BufferObserver):
    """Writes down what the buffer tells it."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def stored(self, group: TrajectoryGroup) -> None:
        self.events.append(("stored", group.group_id))

    def set_aside(self, trajectory: Trajectory) -> None:
        self.events.append(("set_aside", trajectory.id))

    def pulled(self, request: PullRequest, response: PullResponse, waited_s) -> None:  # type: ignore[no-untyped-def]
        self.events.append(("pulled", ([g.group_id for g in response.groups], list(waited_s))))


async def test_observers_hear_each_new_group_each_set_aside_and_each_pull(tmp_path, clock) -> None:
    watcher, metrics = Watcher(), ServerMetrics()
    path = tmp_path / "b.sqlite3"
    async with TrajectoryBuffer(
        path, BufferConfig(), observers=[watcher, metrics], clock=clock
    ) as buffer:
        assert buffer.trainer_version is None
        await buffer.put_group(group("g1"))
        await buffer.put_group(group("g1"))  # a retried put: not new
        await buffer.put_group(group("old", version=0))
        bad = group("bad", size=1).trajectories[0].model_copy(update={"valid": False})
        await buffer.put_invalid(bad)
        clock.now += 2.0
        response, _ = await buffer.pull(pull(1, version=2, staleness=1), policy_version=2)
    assert buffer.trainer_version == 2  # the trainer's version, remembered for the lag
    assert watcher.events[:3] == [("stored", "g1"), ("stored", "old"), ("set_aside", "bad-0")]
    assert watcher.events[3] == ("pulled", ([], []))  # both groups were too stale for v2
    assert response.dropped_stale == 4
    stale = metrics.dropped.labels(reason="stale")._value.get()
    assert stale == 4
