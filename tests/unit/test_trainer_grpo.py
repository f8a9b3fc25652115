"""``ServerGRPOTrainer`` takes the step-start logprobs from the loss's own forward pass, where
TRL computes them in a pass of its own: the same training, one forward pass fewer per step.

Both ways train the tiny default model on the fake server's batches (the same seed, so the
same batches and the same shuffles); TRL's way is its own ``GRPOTrainer`` methods. Ours
also computes each distinct prompt once (``trainer.shared_prompt``; without gradient
checkpointing, as the built-in run trains), TRL's every row whole.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import torch
from test_trainer_loop import _checkpoint_weights, _config
from trainer_fakes import FakeServer, random_group
from trl import GRPOTrainer

from rollgym.contract.wire import TrajectoryGroup
from rollgym.trainer import grpo, shared_prompt
from rollgym.trainer.checkpoint import latest_checkpoint
from rollgym.trainer.loop import TrainResult, train
from rollgym.trainer.rewards import trajectory_return

STEPS = 2
RATIO = "sampling/importance_sampling_ratio/mean"
CAP = 2.0


def _spread_server() -> FakeServer:
    """The fake's groups with behaviour logprobs spread around the tiny model's own (about
    -ln 640), so ratios fall on both sides of 1 and past ``CAP``: truncation and masking act."""
    rng = random.Random(0)

    def group(version: int, size: int) -> TrajectoryGroup:
        made = random_group(version, size, rng)
        spread = [
            t.model_copy(update={"logprobs": [rng.uniform(-8.5, -4.5) * m for m in t.loss_mask]})
            for t in made.trajectories
        ]
        return made.model_copy(update={"trajectories": spread})

    return FakeServer(producer=group)


def _run(root: Path, model: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Train ``STEPS`` steps; the losses, ratios, final weights and forward passes per step."""
    forwards = 0
    logps_of = grpo.ServerGRPOTrainer._get_per_token_logps_and_entropies

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal forwards
        forwards += 1
        return logps_of(self, *args, **kwargs)

    monkeypatch.setattr(grpo.ServerGRPOTrainer, "_get_per_token_logps_and_entropies", counted)
    shared, shared_forward = 0, grpo.shared_prompt_forward

    def shared_counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal shared
        shared += 1
        return shared_forward(*args, **kwargs)

    monkeypatch.setattr(grpo, "shared_prompt_forward", shared_counted)
    config = _config(
        root,
        total_steps=STEPS,
        learning_rate=3e-3,
        importance_sampling=mode,
        importance_sampling_cap=CAP,
        gradient_checkpointing=False,
    )
    result: TrainResult = train(config, _spread_server().client(), model, printer=None)
    logs = [log for log in result.trl_logs if "loss" in log]
    return {
        "losses": [log["loss"] for log in logs],
        "ratios": [log[RATIO] for log in logs],
        "weights": _checkpoint_weights(latest_checkpoint(config.output_dir)),
        "forwards_per_step": forwards / STEPS,
        "shared_prompt_forwards_per_step": shared / STEPS,
    }


def _trl_own_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """TRL scores the batch with its own forward pass and its own ratio; its loss as is."""

    def scored(self: Any, inputs: Any) -> Any:
        output = GRPOTrainer._generate_and_score_completions(self, inputs)
        output[grpo.SAMPLE_INDEX] = torch.arange(len(inputs))
        return output

    monkeypatch.setattr(grpo.ServerGRPOTrainer, "_generate_and_score_completions", scored)
    monkeypatch.setattr(grpo.ServerGRPOTrainer, "_compute_loss", GRPOTrainer._compute_loss)
    monkeypatch.setattr(
        grpo.ServerGRPOTrainer,
        "_get_per_token_logps_and_entropies",
        GRPOTrainer._get_per_token_logps_and_entropies,
    )


@pytest.mark.parametrize(
    "mode", ["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]
)
def test_the_losss_own_logprobs_train_as_trls_extra_forward_pass_did(
    tmp_path, default_model_dir, monkeypatch, mode
) -> None:
    monkeypatch.setattr(shared_prompt, "GPU_MIN_SKIPPED_TOKENS", 1)  # shared on a GPU too
    ours = _run(tmp_path / "ours", default_model_dir, mode, monkeypatch)
    with monkeypatch.context() as patch:
        _trl_own_way(patch)
        trls = _run(tmp_path / "trl", default_model_dir, mode, patch)

    assert (ours["forwards_per_step"], trls["forwards_per_step"]) == (1, 2)
    assert ours["shared_prompt_forwards_per_step"] == 1  # the fake's groups share a prompt
    assert trls["shared_prompt_forwards_per_step"] == 0
    # a sequence's ratio is exp of a sum over its tokens: float32 rounding of a whole
    # sequence (the two ways differ by up to 1.6e-5 relative on CUDA, 1e-6 on the CPU)
    assert ours["ratios"] == pytest.approx(trls["ratios"], rel=5e-5)
    assert ours["losses"] == pytest.approx(trls["losses"], rel=1e-4, abs=1e-7)
    assert any(ratio != pytest.approx(1.0) for ratio in ours["ratios"])  # a correction ran
    # Adam divides each gradient by its own scale: where a gradient is near 0, the float noise
    # of summing the shared prompt's gradient in another order moves a weight by up to ~1e-4
    # (measured: under 9e-5, in at most 130 elements of a matrix); a step moves one by <= 3e-3
    for name, tensor in ours["weights"].items():
        torch.testing.assert_close(tensor, trls["weights"][name], rtol=1e-4, atol=2e-4)


@pytest.mark.filterwarnings("ignore:.*'rollout_func':UserWarning")  # as train() does
@pytest.mark.parametrize(
    "overrides", [{"num_iterations": 2}, {"steps_per_generation": 2, "generation_batch_size": None}]
)
def test_more_than_one_optimizer_step_per_batch_is_refused(
    tmp_path, default_model_dir, overrides
) -> None:
    """There the loss's logprobs would no longer be the ones the batch started from."""
    config = _config(tmp_path)
    with pytest.raises(ValueError, match="one optimizer step per sampled batch"):
        grpo.ServerGRPOTrainer(
            model=str(default_model_dir),
            reward_funcs=trajectory_return,
            args=grpo.grpo_args(config, **overrides),
            train_dataset=grpo.placeholder_prompts(config),
            rollout_func=lambda prompts, trainer: {},
        )
