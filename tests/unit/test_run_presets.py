"""``rollgym run``'s config layers: defaults, a preset, a --config file, flags."""

from __future__ import annotations

import json

import pytest

from rollgym.cli import _build_parser
from rollgym.contract import paths
from rollgym.run.commands import run_config_values
from rollgym.run.pipeline import RunConfig
from rollgym.run.presets import PRESETS
from rollgym.trainer.config import parse_config


def config_of(*argv: str) -> RunConfig:
    return parse_config(RunConfig, **run_config_values(_build_parser().parse_args(["run", *argv])))


def test_run_configs_own_defaults_are_the_guess_presets() -> None:
    guess = config_of("--preset", "guess")
    assert guess == RunConfig(run_dir=paths.runs_dir() / "guess")


def test_a_partial_trainer_table_overrides_only_its_fields(tmp_path) -> None:
    file = tmp_path / "c.json"
    file.write_text(json.dumps({"trainer": {"seed": 1}}))
    config = config_of("--config", str(file))
    assert config.trainer.seed == 1
    preset = config_of().trainer
    assert config.trainer.model_dump(exclude={"seed"}) == preset.model_dump(exclude={"seed"})
    assert preset.temperature == 0.7 != RunConfig().trainer.temperature  # the preset's own


def test_the_smollm2_preset_starts_the_pulled_model_without_a_warm_start(tmp_path) -> None:
    file = tmp_path / "c.json"
    file.write_text(json.dumps({"trainer": {"total_steps": 5}}))
    config = config_of("--preset", "smollm2", "--config", str(file), "--eval-episodes", "10")
    assert config.model_dir == paths.models_dir() / "smollm2-135m-instruct"
    assert config.warmstart is None and config.eval_episodes == 10
    assert config.trainer.total_steps == 5 and config.trainer.learning_rate == 3e-5
    assert config.task.temperature == config.trainer.temperature == 0.7
    assert config.task.env_kwargs == {"low": 1, "high": 6, "feedback": "range"}  # lenient


def test_env_kwargs_are_replaced_whole_not_mixed_with_the_built_in_games(tmp_path) -> None:
    file = tmp_path / "c.json"
    chain_sum = {"config": {"min_terms": 2, "max_terms": 2}}
    task = {"env_id": "reasoning_gym/chain_sum", "env_kwargs": chain_sum, "max_turns": 1}
    file.write_text(json.dumps({"task": task, "warmstart": None}))
    assert config_of("--config", str(file)).task.env_kwargs == chain_sum
    assert RunConfig().task.env_kwargs["strict"] is True  # the default game's, not leaked above


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


def test_seed_changes_every_training_source_but_not_the_evaluation_seeds() -> None:
    from rollgym.trainer.evaluate import held_out_seeds

    plain, seeded = config_of(), config_of("--seed", "3")
    assert (seeded.trainer.seed, seeded.warmstart and seeded.warmstart.seed) == (3, 3)
    assert plain.rollout_job().seeds is None  # 0, 1, 2, ...
    training = seeded.rollout_job().seeds
    assert training is not None and training[0] == 300_000
    assert len(training) == 2 * seeded.trainer.total_steps * seeded.trainer.groups_per_batch
    assert max(training) < min(held_out_seeds(seeded.eval_episodes))
    assert seeded.eval_episodes == plain.eval_episodes  # the same held-out seeds
    # the rest of the trainer and warm start is the built-in run's
    assert seeded.trainer.model_dump(exclude={"seed"}) == plain.trainer.model_dump(exclude={"seed"})


def test_seed_keeps_a_preset_without_warm_start_without_one() -> None:
    config = config_of("--preset", "smollm2", "--seed", "2")
    assert config.warmstart is None and config.trainer.seed == 2


def test_the_built_in_run_trains_the_real_model_as_an_agent_on_the_sandboxed_tool_task():
    config = config_of()
    assert config.model_dir == paths.models_dir() / "smollm2-135m-instruct"
    assert config.task.env_id == "rollgym/Compute-v0" and config.task.sandboxes > 0
    assert config.task.env_kwargs == {}  # the single-call kinds: add, mul, sum
    warm = config.resolved_warmstart()
    assert warm is not None and warm.demos.kind == "compute"
    assert warm.demos.env_kwargs == config.task.env_kwargs  # demonstrations of the same task
    assert warm.demos.direct_share == 0.8  # most answer at once: the flaw RL removes
    assert config.run_dir.name == "default"


def test_the_agent_tiny_preset_teaches_the_3_3m_model_to_copy_before_its_demonstrations():
    config = config_of("--preset", "agent-tiny")
    assert config.model_dir == paths.default_model_dir()
    assert config.task.env_id == "rollgym/Compute-v0" and config.task.sandboxes > 0
    warm = config.resolved_warmstart()
    assert warm is not None and warm.demos.copies > 0 and warm.demos.drills > 0
    assert config.run_dir.name == "agent-tiny"  # never resumes the default's run


def test_the_guess_preset_is_guess_number_with_no_box() -> None:
    config = config_of("--preset", "guess")
    assert config.task.env_id == "rollgym/GuessNumber-v0" and config.task.sandboxes == 0
    assert config.warmstart is not None and config.warmstart.demos.kind == "guess"
    assert config.warmstart.max_grad_norm == 1.0 and config.trainer.total_steps == 120
    assert config.run_dir.name == "guess"  # never resumes the default's run


@pytest.mark.parametrize(
    ("layer", "message"),
    [
        (  # a warm start the file names, on its default (GuessNumber) demonstrations
            {"task": {"env_id": "rollgym/Compute-v0"}, "warmstart": {"epochs": 1.0}},
            "demonstrations play",
        ),
        (
            {
                "task": {"env_id": "rollgym/Compute-v0", "env_kwargs": {"digits": 5}},
                "warmstart": {"demos": {"kind": "compute", "env_kwargs": {}}},
            },
            "differ",
        ),
    ],
)
def test_a_warm_start_for_another_task_is_refused_with_what_to_change(tmp_path, layer, message):
    from rollgym.trainer.errors import TrainerConfigError

    file = tmp_path / "c.json"
    file.write_text(json.dumps(layer))
    with pytest.raises(TrainerConfigError, match=message):
        config_of("--preset", "guess", "--config", str(file))


def test_a_task_of_many_images_asks_its_server_for_boxes_of_any_image(tmp_path) -> None:
    file = tmp_path / "harbor.json"
    task = {"env_id": "harbor/Tasks-v0", "env_kwargs": {"tasks_dir": "t"}, "max_boxes": 8}
    file.write_text(json.dumps({"task": task, "warmstart": None}))
    settings = config_of("--config", str(file)).task.sandbox_settings()
    assert settings == {"ROLLGYM_SANDBOXES__POOL_SIZE": "0", "ROLLGYM_SANDBOXES__MAX_BOXES": "8"}
    assert RunConfig().task.sandbox_settings()["ROLLGYM_SANDBOXES__MAX_BOXES"] == "0"


def test_a_lora_table_turns_the_smollm2_preset_into_a_lora_run(tmp_path) -> None:
    file = tmp_path / "c.json"
    file.write_text(json.dumps({"trainer": {"lora": {"rank": 16, "alpha": 32}}}))
    config = config_of("--preset", "smollm2", "--config", str(file))
    assert config.grpo.lora is not None and config.grpo.lora.rank == 16
    peft = config.grpo.lora.peft_config()
    assert peft.r == 16 and peft.lora_alpha == 32 and "down_proj" in peft.target_modules
    assert config_of("--preset", "smollm2").grpo.lora is None  # off unless asked


def test_a_run_dir_of_another_task_is_refused_and_the_same_task_resumes(tmp_path) -> None:
    from rollgym.run.task import TASK_FILE, claim_run_dir
    from rollgym.trainer.errors import TrainerConfigError

    tool_task, guess = config_of().task, config_of("--preset", "guess").task
    old = tmp_path / "old"  # a finished GuessNumber run from before the marker
    old.mkdir()
    (old / "summary.json").write_text(json.dumps({"config": {"task": guess.model_dump()}}))
    with pytest.raises(TrainerConfigError, match="holds a run of rollgym/GuessNumber-v0"):
        claim_run_dir(old, tool_task)
    claim_run_dir(old, guess)  # its own task resumes, and the dir is now marked
    assert json.loads((old / TASK_FILE).read_text())["env_id"] == guess.env_id

    fresh = tmp_path / "fresh"
    claim_run_dir(fresh, tool_task)
    claim_run_dir(fresh, tool_task.model_copy(update={"sandboxes": 4}))  # boxes may change
    with pytest.raises(TrainerConfigError, match="--restart"):
        claim_run_dir(fresh, tool_task.model_copy(update={"env_kwargs": {"digits": 5}}))


def test_the_agent_smollm2_preset_warm_starts_the_real_model_on_the_two_step_tool_task() -> None:
    config = config_of("--preset", "agent-smollm2")
    assert config.model_dir == paths.models_dir() / "smollm2-135m-instruct"
    assert config.task.env_id == "rollgym/Compute-v0" and config.task.sandboxes > 0
    assert config.task.env_kwargs == {"kinds": ["scale"], "digits": 4}  # two calls an answer
    warm = config.resolved_warmstart()
    assert warm is not None and warm.demos.kind == "compute"
    assert warm.demos.env_kwargs == config.task.env_kwargs  # demonstrations of the same task
    assert warm.demos.copies == warm.demos.drills == 0  # a pretrained model copies already
    assert config.task.temperature == config.trainer.temperature == 0.7
    assert config.warmstart == config_of().warmstart  # the default's recipe, a harder task
    assert config.trainer.model_dump(exclude={"total_steps", "online_eval"}) == (
        config_of().trainer.model_dump(exclude={"total_steps", "online_eval"})
    )
    assert config.run_dir.name == "agent-smollm2"


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_evaluates_online_within_its_steps_so_best_weights_exist(preset) -> None:
    trainer = config_of("--preset", preset).trainer
    assert trainer.online_eval is not None
    assert trainer.online_eval.every <= trainer.total_steps
    assert trainer.total_steps % trainer.online_eval.every == 0  # the last step is one


def test_a_partial_demonstrations_table_keeps_the_built_in_runs_recipe(tmp_path) -> None:
    """A demos table replaces the preset's whole, so its field defaults are the built-in
    run's: naming a few never brings back the 3.3M model's 19,200 copies (an e2e config
    once took SmolLM2 through them for 15 minutes)."""
    file = tmp_path / "c.json"
    file.write_text(json.dumps({"warmstart": {"demos": {"kind": "compute", "episodes": 16}}}))
    warm, default = config_of("--config", str(file)).warmstart, config_of().warmstart
    assert warm is not None and default is not None
    assert warm.demos.episodes == 16 and warm.demos.copies == warm.demos.drills == 0
    assert warm.demos == default.demos.model_copy(update={"episodes": 16})
