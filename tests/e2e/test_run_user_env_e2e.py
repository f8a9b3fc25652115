"""``rollgym run --env <a user's env> --env <another> --report-to tensorboard`` (and W&B,
MLflow, trackio): the one command line of issue 39, end to end on the real server and the
default model.

The env is a user's module on ``PYTHONPATH`` (registered by importing it, reached as
``"module:id"``): nothing in rollgym names it. Its reward is the parity of the answer's
length, so a group's rewards differ even for an untrained model and GRPO has steps to take.
GuessNumber is mixed in, so the real runner draws groups of both and each is evaluated
apart. The series are read back from each tracker's own store (tests/tracker_stores.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tracker_stores import mlflow_series, tensorboard_series, trackio_series, wandb_series

from rollgym.trainer.trackers import run_name

ROOT = Path(__file__).resolve().parents[2]
USER_ENV = '''
import string

import gymnasium
from gymnasium import spaces


class ParityEnv(gymnasium.Env):
    """Say something; 1.0 when it has an even number of characters."""

    def __init__(self):
        self.observation_space = spaces.Text(max_length=200, charset=string.printable)
        self.action_space = spaces.Text(max_length=200, charset=string.printable)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "Say a few letters.", {"task_id": "parity"}

    def step(self, action):
        return "Done.", float(len(action.strip()) % 2 == 0), True, False, {}


gymnasium.register("user/Parity-v0", entry_point="parity_env:ParityEnv", max_episode_steps=1)
'''
ENV_ID = "parity_env:user/Parity-v0"
MIXED = "rollgym/GuessNumber-v0"
STEPS = 2


def test_a_user_env_trains_from_the_command_line_into_tensorboard(tmp_path, default_model_dir):
    site = tmp_path / "user_site"
    site.mkdir()
    (site / "parity_env.py").write_text(USER_ENV)
    run_dir = tmp_path / "run"
    command = [
        sys.executable, "-m", "rollgym.cli", "run", "--env", f"{ENV_ID}@3", "--env", MIXED, "--steps", str(STEPS),
        "--model", str(default_model_dir),  # the untrained 3.3M model, not the preset's SmolLM2
        "--group-size", "4", "--groups-per-batch", "2", "--max-tokens", "6",
        "--eval-episodes", "4", "--run-dir", str(run_dir), "--report-to", "tensorboard",
        "--report-to", "wandb", "--report-to", "mlflow", "--report-to", "trackio",
    ]  # fmt: skip
    env = {  # trackio's store: this process's (tests/conftest.py), W&B's and MLflow's: the run's
        **{k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "MLFLOW_"))},
        "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]),
    }
    done = subprocess.run(
        command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=1500, check=False
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "warm start: none" in done.stdout  # the built-in game's demonstrations left out

    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == STEPS
    assert summary["config"]["task"]["env_id"] == ENV_ID
    assert summary["config"]["task"]["env_kwargs"] == {}
    assert summary["success_rate"]["rl"]["episodes"] == 4
    assert summary["config"]["task"]["mixture"][0]["env_id"] == MIXED
    per_env = summary["per_env"]
    assert per_env[ENV_ID]["trained_episodes"] > 0  # GuessNumber's groups may all be dropped
    for env in (ENV_ID, MIXED):  # zero-variance by an untrained model; both are evaluated
        assert per_env[env]["held_out_rl"]["episodes"] == 4
        assert per_env[env]["held_out_warm_start"]["episodes"] == 4

    grpo = run_dir / "grpo"
    steps = [json.loads(line) for line in (grpo / "steps.jsonl").open()]
    for series, prefix in (
        (tensorboard_series(grpo), "train/"),
        (wandb_series(grpo), "train/"),
        (mlflow_series(grpo), ""),  # transformers' MLflow names have no train/
        (trackio_series(run_name(grpo)), "train/"),
    ):
        for tag in ("loss", "rollgym/reward_mean", "rollgym/latency/model_p50"):
            assert prefix + tag in series, sorted(series)
            assert [step for step, _ in series[prefix + tag]] == list(range(1, STEPS + 1))
        # each env's series at the steps whose batch held its groups: together, every step
        env_steps = {
            step
            for env in (ENV_ID, MIXED)
            for step, _ in series.get(f"{prefix}rollgym/env/{env}/reward_mean", [])
        }
        assert f"{prefix}rollgym/env/{ENV_ID}/reward_mean" in series
        assert env_steps == set(range(1, STEPS + 1))
        rewards = [value for _, value in series[f"{prefix}rollgym/reward_mean"]]
        assert rewards == pytest.approx([step["reward_mean"] for step in steps])
        # the server's cost board, answered to a step's report, comes with the next step's
        cost = series[f"{prefix}rollgym/cost/machine_s_per_trained_sample"]
        assert [step for step, _ in cost] == list(range(2, STEPS + 1))
        assert all(seconds > 0 for _, seconds in cost)
        # the last weights' held-out success, measured at the last step: summary.json's too
        for env, tag in ((ENV_ID, "rollgym/held_out"), (MIXED, f"rollgym/held_out/{MIXED}")):
            rate = per_env[env]["held_out_rl"]["rate"]
            assert series[f"{prefix}{tag}/success_rate"] == [(STEPS, pytest.approx(rate))]
