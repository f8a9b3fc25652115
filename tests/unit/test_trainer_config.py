"""The trainer's typed config: modes, derived sizes, errors that say how to fix them."""

from __future__ import annotations

import pytest

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
    ],
)
def test_bad_values_are_rejected_with_the_field_named(tmp_path, values, needle) -> None:
    with pytest.raises(TrainerConfigError, match=needle):
        parse_config(TrainerConfig, output_dir=tmp_path, **values)
