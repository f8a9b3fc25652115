"""The trainer's typed config: modes, derived sizes, errors that say how to fix them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rollgym.contract.shape import RunShape
from rollgym.contract.wire import RolloutJob
from rollgym.trainer.config import TrainerConfig, parse_config
from rollgym.trainer.errors import TrainerConfigError


def test_one_config_gives_both_modes(tmp_path) -> None:
    assert TrainerConfig(output_dir=tmp_path, max_staleness=0).mode == "sync"
    assert TrainerConfig(output_dir=tmp_path, max_staleness=2).mode == "async"
    assert TrainerConfig(output_dir=tmp_path, group_size=8, groups_per_batch=3).batch_size == 24


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"max_staleness": 0, "push_every": 2}, "push_every=1"),
        ({"checkpoint_every": 3, "push_every": 2}, "multiple of push_every"),
        ({"group_size": 1}, "group_size"),
        ({"keep_checkpoints": 1}, "keep_checkpoints"),
        ({"learning_rate": 1e-3, "lr": 1e-3}, "lr"),
        ({"broadcast": {"backend": "gloo"}, "lora": {"serve": "adapter"}}, "uploads only"),
        ({"broadcast": {"backend": "mpi"}}, "broadcast.backend"),
    ],
)
def test_bad_values_are_rejected_with_the_field_named(tmp_path, values, needle) -> None:
    with pytest.raises(TrainerConfigError, match=needle):
        parse_config(TrainerConfig, output_dir=tmp_path, **values)


def test_the_trainer_and_the_rollout_job_share_one_shape(tmp_path) -> None:
    """Declared once (rollgym.contract.shape): the same fields, bounds and defaults."""
    config = TrainerConfig(output_dir=tmp_path)
    job = RolloutJob(env_id="rollgym/GuessNumber-v0")
    assert isinstance(config, RunShape) and isinstance(job, RunShape)
    assert config.differences(job) == []
    assert config.differences(job.model_copy(update={"max_staleness": 0})) == [
        "max_staleness 1, not 0"
    ]


@pytest.mark.parametrize(
    ("job", "refused"),
    [
        (None, False),  # no job: the trainer's shape is the run's
        ({"group_size": 8, "groups_per_batch": 4, "max_staleness": 1}, False),
        ({"group_size": 4, "groups_per_batch": 8, "max_staleness": 1}, True),
    ],
)
def test_rollgym_train_refuses_a_server_job_of_another_shape(
    tmp_path, monkeypatch, capsys, job, refused
) -> None:
    """``rollgym train`` reads the server's job first: another shape is one line on stderr
    and exit status 2, before any training starts."""
    from trainer_fakes import FakeServer

    from rollgym import cli
    from rollgym.run import train_command
    from rollgym.trainer import client

    fake = FakeServer()
    if job is not None:
        fake.job = RolloutJob(env_id="rollgym/GuessNumber-v0", **job)
    monkeypatch.setattr(client, "ServerClient", lambda config: fake.client())
    trained = SimpleNamespace(steps=1, policy_version=1)
    monkeypatch.setattr(
        train_command, "train", lambda *a, **kw: pytest.fail("trained") if refused else trained
    )
    monkeypatch.setenv("ROLLGYM_ADMIN_TOKEN", "t")
    args = ["train", "--server", "http://fake", "--model", "m", "--output-dir", str(tmp_path)]
    if refused:
        assert cli.main(args) == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert "another shape (group_size 8, not 4; groups_per_batch 4, not 8)" in line
    else:
        assert cli.main(args) == 0
