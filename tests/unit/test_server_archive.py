"""The buffer's archive: groups that leave the queue are kept for export, as long as told."""

from __future__ import annotations

import pytest
from test_server_buffer import Clock, group, pull

from rollgym.data.sources import from_data_dir
from rollgym.server.buffer.archive import ArchiveFile
from rollgym.server.buffer.store import TrajectoryBuffer
from rollgym.server.config import BufferConfig


async def test_acked_groups_move_to_the_archive_and_survive_a_restart(tmp_path) -> None:
    path = tmp_path / "b.sqlite3"
    async with TrajectoryBuffer(path, BufferConfig()) as buffer:
        await buffer.put_group(group("g1"))
        await buffer.put_group(group("g2"))
        await buffer.pull(pull(2), policy_version=0)
        assert await buffer.ack(["g1", "g2"]) == 2
        assert await buffer.ack(["g1"]) == 1  # idempotent: archived once
    async with TrajectoryBuffer(path, BufferConfig()) as buffer:
        page = await buffer.read_archive("groups", 0, 10)
    assert [item.group.group_id for item in page.items] == ["g1", "g2"]
    assert {item.outcome for item in page.items} == {"trained"}
    assert page.items[0].group.trajectories[0].completion_ids == [3, 4]
    assert page.next_after is None


async def test_stale_groups_are_archived_as_stale(tmp_path) -> None:
    async with TrajectoryBuffer(tmp_path / "b.sqlite3", BufferConfig()) as buffer:
        await buffer.put_group(group("old", version=0))
        await buffer.pull(pull(1, version=5, staleness=1), policy_version=5)
        page = await buffer.read_archive("groups", 0, 10)
    assert [(i.group.group_id, i.outcome) for i in page.items] == [("old", "stale")]


async def test_retention_zero_keeps_nothing(tmp_path) -> None:
    config = BufferConfig(archive_retention_s=0)
    async with TrajectoryBuffer(tmp_path / "b.sqlite3", config) as buffer:
        await buffer.put_group(group("g1"))
        await buffer.ack(["g1"])
        assert (await buffer.read_archive("groups", 0, 10)).items == []


async def test_retention_prunes_what_is_older(tmp_path) -> None:
    clock = Clock()
    config = BufferConfig(archive_retention_s=60)
    async with TrajectoryBuffer(tmp_path / "b.sqlite3", config, clock=clock) as buffer:
        await buffer.put_group(group("early"))
        await buffer.ack(["early"])
        clock.now += 61
        await buffer.put_group(group("late"))
        await buffer.ack(["late"])
        page = await buffer.read_archive("groups", 0, 10)
    assert [i.group.group_id for i in page.items] == ["late"]


async def test_pages_follow_the_cursor(tmp_path) -> None:
    async with TrajectoryBuffer(tmp_path / "b.sqlite3", BufferConfig()) as buffer:
        for i in range(5):
            await buffer.put_group(group(f"g{i}"))
        await buffer.ack([f"g{i}" for i in range(5)])
        first = await buffer.read_archive("groups", 0, 2)
        assert first.next_after is not None
        second = await buffer.read_archive("groups", first.next_after, 2)
    assert [i.group.group_id for i in first.items + second.items] == ["g0", "g1", "g2", "g3"]


async def test_the_file_reader_sees_groups_and_invalid_ones_while_the_buffer_is_open(
    tmp_path,
) -> None:
    path = tmp_path / "b.sqlite3"
    async with TrajectoryBuffer(path, BufferConfig()) as buffer:
        await buffer.put_group(group("g1"))
        await buffer.ack(["g1"])
        bad = (
            group("bad", size=1)
            .trajectories[0]
            .model_copy(update={"valid": False, "invalid_reason": "docker died"})
        )
        await buffer.put_invalid(bad)
        with ArchiveFile(path) as archive:
            groups = [i for p in archive.pages("groups", page_size=1) for i in p.items]
            invalid = [i for p in archive.pages("invalid") for i in p.items]
    assert [i.group.group_id for i in groups] == ["g1"]
    assert [(i.outcome, i.group.trajectories[0].invalid_reason) for i in invalid] == [
        ("invalid", "docker died")
    ]


def test_the_file_reader_needs_a_file(tmp_path) -> None:
    with pytest.raises(FileNotFoundError):
        ArchiveFile(tmp_path / "missing.sqlite3")


async def test_reading_a_data_dir_tells_its_progress_against_the_archives_size(tmp_path) -> None:
    """An export's reader counts groups and invalid trajectories page by page against how
    many the file holds, ending at the total."""
    async with TrajectoryBuffer(tmp_path / "buffer.sqlite3", BufferConfig()) as buffer:
        for i in range(3):
            await buffer.put_group(group(f"g{i}"))
        await buffer.ack([f"g{i}" for i in range(3)])
        bad = group("bad", size=1).trajectories[0]
        await buffer.put_invalid(bad.model_copy(update={"valid": False, "invalid_reason": "x"}))
    told: list[tuple[int, int | None]] = []
    items = list(
        from_data_dir(tmp_path, include_invalid=True, progress=lambda *call: told.append(call))
    )
    assert len(items) == 3 * 2 + 1  # two trajectories a group, the invalid one alone
    assert told == [(3, 4), (4, 4)]  # a page of groups, a page of invalid ones
