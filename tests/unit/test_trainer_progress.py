"""The live table and the report's note: the environment's turns apart from the model's,
and the sandbox's part of them where turns used a box."""

from __future__ import annotations

import dataclasses

from test_data import trajectory

from rollgym.contract.wire import TrajectoryGroup, TurnRecord
from rollgym.trainer.progress import RunProgress


def _group(sandbox_s: list[float]) -> TrajectoryGroup:
    """Episodes of one turn each: the model 20 ms, the env 5 ms of which ``sandbox_s``."""
    episodes = []
    for seconds in sandbox_s:
        turn = TurnRecord(
            index=0,
            policy_version=2,
            context_tokens=3,
            completion_tokens=1,
            env_tokens=1,
            model_s=0.02,
            env_s=0.005 + seconds,
            sandbox_s=seconds,
        )
        episodes.append(trajectory([[5]]).model_copy(update={"turns": [turn]}))
    return TrajectoryGroup(group_id="g", env_id="rollgym/Compute-v0", trajectories=episodes)


def test_turns_that_used_a_box_get_a_sandbox_row_with_p50_and_p99() -> None:
    progress = RunProgress(clock=lambda: 100.0)
    progress.on_groups([_group([0.0, 0.010, 0.010, 0.010, 0.200])], trainer_version=2)
    latency = progress.turn_latency()
    assert set(latency) == {"model", "environment", "sandbox"}
    p50, _, p99 = latency["sandbox"]
    assert p50 == 0.010 and 0.19 < p99 < 0.2  # the turn without a box is not among them
    table = progress.render(total_steps=4)
    assert "  per turn          p50       p90       p99" in table
    rows = {line.split()[0]: line.split()[1:] for line in table.splitlines()[-3:]}
    assert rows["model"][0] == "20.0ms" and rows["sandbox"][0] == "10.0ms"
    assert "\n    sandbox " in table  # indented: a part of the environment's turn


def test_turns_without_a_box_have_no_sandbox_row() -> None:
    progress = RunProgress(clock=lambda: 100.0)
    progress.on_groups([_group([0.0, 0.0])], trainer_version=2)
    assert set(progress.turn_latency()) == {"model", "environment"}
    assert "sandbox" not in progress.render(total_steps=4)


def test_the_reports_note_gives_the_environments_share_and_each_turns_latency() -> None:
    from rollgym.run.plot import turn_note
    from rollgym.trainer.loop import TrainResult

    fields = {f.name: None for f in dataclasses.fields(TrainResult) if f.init}
    result = TrainResult(
        **{
            **fields,
            "stage_shares": {"environment": (3.0, 1.0)},
            "turn_latency": {"sandbox": (0.0123, 0.02, 0.0456)},
        }
    )
    assert turn_note(result).splitlines() == [
        "environment busy 75% of the session",
        "sandbox turn p50 12.3 ms, p99 45.6 ms",
    ]
