"""TRL's own ``GRPOTrainer`` trains on a sandboxed rollgym env through
``rollgym.doors.trl`` (issue 36, part 3): no rollgym server, Compute-v0 in hardened Docker
boxes from the factory's pool, the tool-calling test model.

What it shows: TRL makes the environments, resets each rollout's episode in a box,
renders the env's tool, generates, and scores every rollout through ``get_reward`` and
``closing_reward`` (each closing message stepped in its env) for two optimizer steps.
What it cannot show: a tool call the model wrote reaching the box. TRL shows the model the
tool as transformers' ``get_json_schema`` derives it from the method, which gives every
argument a description; Compute's ``code`` argument has none in rollgym's prompt, and the
3.3M test model, trained on that exact prompt, writes no valid call once the prompt gains
``"description": "code"`` (greedy, 0 of 3 questions, against 3 of 3 without it). Tool calls
through the door into Docker boxes are tests/docker/test_doors_trl_docker.py's."""

from __future__ import annotations

import pickle
from pathlib import Path


def test_trls_grpo_trainer_trains_on_compute_in_docker_boxes(
    tool_model_dir: Path, tmp_path: Path
) -> None:
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOTrainer

    from rollgym.doors.trl import (
        TrlEnvironments,
        closing_reward,
        quiet_experimental,
        response_template,
    )
    from rollgym.trainer.config import TrainerConfig
    from rollgym.trainer.grpo import grpo_args

    config = TrainerConfig(
        output_dir=tmp_path / "grpo",
        group_size=4,
        groups_per_batch=1,
        total_steps=2,
        gradient_checkpointing=False,
    )
    tokenizer = AutoTokenizer.from_pretrained(tool_model_dir)
    tokenizer.response_template = response_template()
    with TrlEnvironments("rollgym/Compute-v0", pool_size=4) as environments:
        rows = environments.rows(range(2))
        with quiet_experimental():
            trainer = GRPOTrainer(
                model=str(tool_model_dir),
                args=grpo_args(
                    config,
                    max_completion_length=96,
                    max_tool_calling_iterations=2,
                    save_strategy="no",
                ),
                train_dataset=Dataset.from_list(rows),
                processing_class=tokenizer,
                environment_factory=environments,
                reward_funcs=[closing_reward],
            )
        trainer.train()
        made = list(environments._made)
        boxes = [e._env.unwrapped._box for e in made]
        fresh = pickle.loads(pickle.dumps(made[0]))  # what an async trainer's worker gets
        assert type(fresh).__name__ == "Compute" and fresh._factory is not environments
        fresh._factory.close()  # the copy made a pool of its own, as another process would

    logs = [log for log in trainer.state.log_history if "rewards/Compute/mean" in log]
    assert trainer.state.global_step == 2 and len(logs) == 2
    assert all("rewards/closing_reward/mean" in log for log in logs)
    assert len(made) == 4 and all(box is not None for box in boxes)  # each rollout in a box
    assert all(e._env.unwrapped.turns >= 1 for e in made)  # every closing message stepped
    assert environments.env_s > 0
