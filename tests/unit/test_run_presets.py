"""``rollgym run``'s config layers: defaults, a preset, a --config file, flags."""

from __future__ import annotations

import json

import pytest

from rollgym.cli import _build_parser
from rollgym.contract import paths
from rollgym.run.commands import run_config_values
from rollgym.run.pipeline import RunConfig
from rollgym.trainer.config import parse_config


def config_of(*argv: str) -> RunConfig:
    return parse_config(RunConfig, **run_config_values(_build_parser().parse_args(["run", *argv])))


def test_the_default_is_the_built_in_run() -> None:
    assert config_of() == RunConfig()


def test_a_partial_trainer_table_overrides_only_its_fields(tmp_path) -> None:
    file = tmp_path / "c.json"
    file.write_text(json.dumps({"trainer": {"seed": 1}}))
    config = config_of("--config", str(file))
    assert config.trainer.seed == 1
    assert config.trainer.model_dump(exclude={"seed"}) == RunConfig().trainer.model_dump(
        exclude={"seed"}
    )


def test_the_smollm2_preset_starts_the_pulled_model_without_a_warm_start(tmp_path) -> None:
    file = tmp_path / "c.json"
    file.write_text(json.dumps({"trainer": {"total_steps": 5}}))
    config = config_of("--preset", "smollm2", "--config", str(file), "--eval-episodes", "10")
    assert config.model_dir == paths.models_dir() / "smollm2-135m-instruct"
    assert config.warmstart is None and config.eval_episodes == 10
    assert config.trainer.total_steps == 5 and config.trainer.learning_rate == 1e-5
    assert config.task.temperature == config.trainer.temperature == 0.7


def test_flags_win_over_the_file_and_the_preset(tmp_path) -> None:
    file = tmp_path / "c.json"
    file.write_text(json.dumps({"trainer": {"total_steps": 5, "max_staleness": 2}}))
    config = config_of("--preset", "smollm2", "--config", str(file), "--steps", "7")
    assert (config.trainer.total_steps, config.trainer.max_staleness) == (7, 2)


def test_a_bad_field_names_itself(tmp_path) -> None:
    from rollgym.trainer.errors import TrainerConfigError

    file = tmp_path / "c.json"
    file.write_text(json.dumps({"trainer": {"learning_rate": -1}}))
    with pytest.raises(TrainerConfigError, match=r"trainer\.learning_rate"):
        config_of("--config", str(file))
