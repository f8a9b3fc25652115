"""kill -9 of the server, then of the trainer, during a real GRPO run (``bench.chaos``):
no acked group is lost, none is trained twice, the version never goes back."""

from __future__ import annotations

from bench.chaos import GROUP_SIZE, GROUPS_PER_STEP, MAX_STALENESS, run


def test_kill_9_of_either_side_loses_nothing_and_trains_nothing_twice(
    tmp_path, default_model_dir
) -> None:
    report = run(tmp_path, default_model_dir, steps=6, kill_server_at=2, kill_trainer_at=4)
    print("\n" + report.table())
    assert report.steps == 6
    assert report.lost == 0 and report.trained_twice == 0
    assert report.acked >= report.trained == 6 * 2  # every step's groups, trained once
    # back at the version its store had committed when killed: the one last read, or one
    # more when a push landed between that read and the kill (or one less when the kill
    # fell between a swap and its commit: that push is reconciled by the trainer)
    persisted = report.versions["server's persisted version at its kill"]
    assert report.versions["server after its restart"] == persisted
    assert abs(persisted - report.versions["server before its kill"]) <= 1
    assert report.monotone
    stale = report.dropped["stale_server"] + report.dropped["stale_trainer"]
    if (
        report.versions["trainer's checkpoint at its kill"]
        == report.versions["server at the trainer's kill"]
    ):
        assert stale == 0  # nothing re-pushed: groups buffered across both restarts stayed fresh
    else:  # killed between a push and its checkpoint: the restored weights went out anew,
        # and at most one window of groups sampled from the lost step fell out, counted
        assert stale <= (MAX_STALENESS + 1) * GROUPS_PER_STEP * GROUP_SIZE
