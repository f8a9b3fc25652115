"""``rollgym run``'s common knobs as flags, and the rules that keep a new env or model from
inheriting the preset's game, warm start and run dir."""

from __future__ import annotations

import json

import pytest

from rollgym.cli import _build_parser, main
from rollgym.contract import paths
from rollgym.run.commands import run_config_values
from rollgym.run.pipeline import RunConfig
from rollgym.run.task import TaskConfig
from rollgym.trainer.config import parse_config

USER_ENV = "example/Reverse-v0"
PRESET_MODEL = "smollm2-135m-instruct"  # the default preset's model


def config_of(*argv: str) -> RunConfig:
    return parse_config(RunConfig, **run_config_values(_build_parser().parse_args(["run", *argv])))


def test_each_knob_sets_its_field_and_keeps_the_rest_of_the_preset() -> None:
    config = config_of(
        "--steps", "7", "--group-size", "4", "--groups-per-batch", "3", "--lr", "1e-5",
        "--max-tokens", "32", "--temperature", "0.9", "--sandboxes", "2",
        "--report-to", "tensorboard",
    )  # fmt: skip
    trainer, task = config.trainer, config.task
    assert (trainer.total_steps, trainer.group_size, trainer.groups_per_batch) == (7, 4, 3)
    assert trainer.learning_rate == 1e-5 and trainer.report_to == ["tensorboard"]
    assert (task.max_tokens, task.sandboxes) == (32, 2)
    assert task.temperature == trainer.temperature == 0.9  # sampled and trained alike
    default = config_of()  # the default preset's
    assert config.warmstart == default.warmstart and config.task.env_id == default.task.env_id
    assert trainer.online_eval == default.trainer.online_eval


def test_a_new_env_starts_clean_no_game_kwargs_no_warm_start_its_own_run_dir() -> None:
    config = config_of("--env", USER_ENV, "--max-tokens", "24")
    assert config.task.env_id == USER_ENV and config.task.env_kwargs == {}
    assert config.warmstart is None
    # the built-in task's 0.7 was its own: the env's default, trained as sampled
    assert config.task.temperature == config.trainer.temperature == TaskConfig().temperature
    assert config.run_dir == paths.runs_dir() / f"example-Reverse-v0-{PRESET_MODEL}"
    assert config.rollout_job().env_id == USER_ENV


def test_a_module_id_env_and_its_kwargs_are_taken_as_given() -> None:
    env_id = f"rollgym_example_env:{USER_ENV}"
    config = config_of("--env", env_id, "--env-kwargs", '{"words": ["abc"]}')
    assert config.task.env_id == env_id and config.task.env_kwargs == {"words": ["abc"]}
    assert config.run_dir.name == f"example-Reverse-v0-{PRESET_MODEL}"


def test_a_partial_config_file_for_another_env_needs_no_other_field(tmp_path) -> None:
    file = tmp_path / "mine.json"
    file.write_text(json.dumps({"task": {"env_id": USER_ENV}}))
    config = config_of("--config", str(file))  # was: the warm start's game clashed
    assert config.task.env_kwargs == {} and config.warmstart is None


def test_a_pulled_model_by_name_starts_as_it_is() -> None:
    config = config_of("--preset", "guess", "--model", PRESET_MODEL)
    assert config.model_dir == paths.models_dir() / PRESET_MODEL
    assert config.warmstart is None  # the guess preset's SFT was for its 3.3M model
    assert config.task.env_kwargs == config_of("--preset", "guess").task.env_kwargs


def test_a_model_directory_is_taken_and_a_named_warm_start_is_kept(tmp_path) -> None:
    (tmp_path / "config.json").write_text("{}")
    file = tmp_path / "warm.json"
    file.write_text(json.dumps({"warmstart": {"epochs": 1.0}}))
    config = config_of("--model", str(tmp_path), "--config", str(file))
    assert config.model_dir == tmp_path.resolve()
    assert config.warmstart is not None and config.warmstart.epochs == 1.0


def test_no_warm_start_flag() -> None:
    assert config_of("--no-warm-start").warmstart is None


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--model", "no-such-model"], "--model no-such-model: not a catalog model"),
        (["--steps", "0"], "trainer.total_steps: Input should be greater than or equal to 1"),
        (
            ["--preset", "guess", "--max-turns", "4"],
            "warmstart.demos.max_turns must equal task.max_turns",
        ),
        (["--group-size", "1"], "group_size must be at least 2"),
    ],
)
def test_a_bad_value_gets_one_line_and_exit_2(argv: list[str], says: str, capsys) -> None:
    assert main(["run", "--no-doctor", *argv]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_config_file_that_is_not_an_object_gets_one_line(tmp_path, capsys) -> None:
    file = tmp_path / "bad.json"
    file.write_text("[1, 2]")
    assert main(["run", "--config", str(file)]) == 2
    assert capsys.readouterr().err == (
        f"rollgym run: --config {file}: a JSON object of RunConfig fields, please\n"
    )


def test_env_kwargs_must_be_a_json_object(capsys) -> None:
    with pytest.raises(SystemExit):
        _build_parser().parse_args(["run", "--env-kwargs", "[1]"])
    assert "a JSON object" in capsys.readouterr().err


def test_help_reads_as_a_how_to(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = capsys.readouterr().out
    for flag in ("--env ID", "--model NAME|DIR", "--steps N", "--lr LR", "--config JSON"):
        assert flag in text
    assert "examples:" in text and "rollgym run --env example/Reverse-v0" in text


def test_several_envs_make_a_weighted_mixture_with_its_own_run_dir() -> None:
    config = config_of("--env", "rollgym/Compute-v0@3", "--env", f"{USER_ENV}@1.5")
    task, preset = config.task, config_of()
    assert (task.env_id, task.weight) == ("rollgym/Compute-v0", 3.0)
    assert task.env_kwargs == preset.task.env_kwargs  # the first env is the preset's
    assert task.sandboxes == preset.task.sandboxes
    assert [(p.env_id, p.weight, p.env_kwargs) for p in task.mixture] == [(USER_ENV, 1.5, {})]
    assert config.warmstart == preset.warmstart  # it still plays the preset's task
    assert config.run_dir.name == f"rollgym-Compute-v0+example-Reverse-v0-{PRESET_MODEL}"
    job = config.rollout_job()
    assert [(p.env_id, p.weight) for p in job.parts()] == [
        ("rollgym/Compute-v0", 3.0),
        (USER_ENV, 1.5),
    ]


def test_a_mixed_env_without_a_weight_weighs_1() -> None:
    task = config_of("--env", f"{USER_ENV}@2", "--env", "rollgym/GuessNumber-v0").task
    assert task.weight == 2.0
    assert [(p.env_id, p.weight) for p in task.mixture] == [("rollgym/GuessNumber-v0", 1.0)]


@pytest.mark.parametrize("bad", ["x@0", "x@-1", "x@many", "@2"])
def test_a_bad_weight_is_refused_by_the_parser(bad: str, capsys) -> None:
    with pytest.raises(SystemExit):
        _build_parser().parse_args(["run", "--env", bad])
    assert "give ID or ID@WEIGHT, a weight above 0" in capsys.readouterr().err


def test_a_curriculum_on_a_seed_pool_reaches_the_rollout_job() -> None:
    config = config_of("--seed-pool", "16", "--curriculum", "--seed", "2")
    job = config.rollout_job()
    assert job.seeds == list(range(200_000, 200_016))  # the pool, in the seed's own block
    assert job.curriculum is not None and job.curriculum.floor == 0.1
    assert config_of("--seed-pool", "4").rollout_job().curriculum is None  # off by default


def test_a_curriculum_without_a_pool_gets_one_line(capsys) -> None:
    assert main(["run", "--no-doctor", "--curriculum"]) == 2
    err = capsys.readouterr().err
    assert "a curriculum needs task.seed_pool (--seed-pool N)" in err and err.count("\n") == 1


def test_sigterm_interrupts_a_run_as_ctrl_c_does_and_the_old_handler_comes_back() -> None:
    import os
    import signal

    from rollgym.run.commands import sigterm_as_interrupt

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), sigterm_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
        signal.pause()  # never reached: the handler raises first
    assert signal.getsignal(signal.SIGTERM) is before
