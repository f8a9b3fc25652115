"""``rollgym train`` against a server that already holds groups: the traps of issue 39 (part
5), each with its decision or its line, and a non-zero exit when nothing was trained.

The rules are pure (``trainer.preflight``); the runs train the tiny default model against
the fake server. Real twin: tests/e2e/test_trainer_e2e.py (the loop against the real server).
"""

from __future__ import annotations

import random
from pathlib import Path

from trainer_fakes import FakeServer, random_group

from rollgym.contract.wire import PolicyInfo, RolloutStatus
from rollgym.run.train_command import train_on_server
from rollgym.trainer.config import TrainerConfig
from rollgym.trainer.preflight import plan_start


def _config(tmp_path: Path, **values) -> TrainerConfig:
    defaults = dict(
        output_dir=tmp_path / "run",
        group_size=4,
        groups_per_batch=1,
        total_steps=2,
        max_staleness=1,
        learning_rate=1e-3,
        pull_timeout_s=0.05,
        stall_timeout_s=0.5,
    )
    return TrainerConfig(**{**defaults, **values})


def _status(buffered: int, *, running: bool = False) -> RolloutStatus:
    return RolloutStatus(
        running=running,
        job=None,
        in_flight=0,
        buffered_groups=buffered,
        completed_groups=buffered,
        dropped_zero_variance=0,
        invalid_trajectories=0,
    )


def _plan(config: TrainerConfig, *, version=0, served="m", buffered=10, running=False, step=None):
    return plan_start(
        config,
        model=Path("/models/m"),
        policy=PolicyInfo(policy_version=version, model=served, updating=False),
        rollouts=_status(buffered, running=running),
        resumed_step=step,
    )


def _played(fake: FakeServer, count: int) -> None:
    """Groups external agents played at the server's version 0."""
    rng = random.Random(0)
    fake.add(*(random_group(0, 4, rng) for _ in range(count)))


# --- the rules ------------------------------------------------------------------------------


def test_no_push_when_the_server_serves_the_starting_weights(tmp_path) -> None:
    config = _config(tmp_path)
    assert not _plan(config).push_start
    assert _plan(config, version=1).push_start  # it took an update: not the start any more
    assert _plan(config, served="other").push_start
    assert not _plan(config, version=1, step=1).push_start  # a resume decides by itself


def test_buffered_groups_that_would_go_stale_get_a_line_with_the_staleness_to_use(
    tmp_path,
) -> None:
    config = _config(tmp_path, total_steps=5, max_staleness=1)
    (note,) = _plan(config, buffered=5).notes[1:]
    assert "stale after 2 step(s)" in note and "--max-staleness 4 keeps them all" in note
    pushed = _plan(config, buffered=5, served="other")
    assert "stale after 1 step(s)" in pushed.notes[0] and "--max-staleness 5" in pushed.notes[0]
    assert _plan(config, buffered=5, running=True).notes[1:] == []  # a job samples fresh ones
    assert _plan(_config(tmp_path, total_steps=2), buffered=5).notes[1:] == []


def test_a_batch_bigger_than_the_buffer_gets_a_line_with_the_batch_to_use(tmp_path) -> None:
    notes = _plan(_config(tmp_path, groups_per_batch=4), buffered=3).notes
    assert any("holds 3 complete group(s)" in n and "--groups-per-batch 3" in n for n in notes)


def test_a_finished_run_in_the_output_dir_is_refused(tmp_path) -> None:
    plan = _plan(_config(tmp_path, total_steps=2), step=2)
    assert plan.refusal is not None and "already trained to step 2" in plan.refusal
    assert _plan(_config(tmp_path, total_steps=3), step=2).refusal is None


# --- the command against a server that holds played groups -------------------------------------


def test_groups_played_before_the_run_are_all_trained(tmp_path, default_model_dir) -> None:
    fake = FakeServer(producer=None, model=default_model_dir.name)
    _played(fake, 2)
    lines: list[str] = []
    code = train_on_server(
        _config(tmp_path), fake.client(), default_model_dir, printer=lines.append
    )
    assert code == 0
    assert len(fake.weights) == 2  # one push per step, none of the starting weights
    assert fake.dropped_stale == 0 and len(fake.acked) == 2
    assert any("nothing is pushed first" in line for line in lines)


def test_a_run_that_starves_exits_1_with_what_to_do(tmp_path, default_model_dir, capsys) -> None:
    fake = FakeServer(producer=None, model=default_model_dir.name)
    _played(fake, 1)
    lines: list[str] = []
    config = _config(tmp_path, groups_per_batch=2)
    code = train_on_server(config, fake.client(), default_model_dir, printer=lines.append)
    assert code == 1
    assert any("--groups-per-batch 1 trains on what is there" in line for line in lines)
    (last,) = capsys.readouterr().err.splitlines()[-1:]
    assert last.startswith(
        "rollgym train: no trainable group for 0s (have 1/2; the server filtered 0"
    )
    assert last.endswith(f"steps done are checkpointed in {config.output_dir}")


def test_a_reused_output_dir_of_a_finished_run_exits_1(tmp_path, default_model_dir, capsys) -> None:
    fake = FakeServer(model=default_model_dir.name)  # samples for every pull
    config = _config(tmp_path, total_steps=1)
    assert train_on_server(config, fake.client(), default_model_dir, printer=lambda _: None) == 0
    pushes = len(fake.weights)
    assert train_on_server(config, fake.client(), default_model_dir, printer=lambda _: None) == 1
    assert len(fake.weights) == pushes  # it did not even start
    assert "already trained to step 1" in capsys.readouterr().err
