"""The trust region by rejection: a step that moves the policy too far on its batch is undone.

On a small torch policy for the rule, then through the GRPO loop on the fake server with the
tiny default model; the built-in run's e2e test (tests/e2e/test_main_job.py) runs it on the
real server.
"""

from __future__ import annotations

import torch
from test_trainer_loop import _checkpoint_weights, _config
from trainer_fakes import FakeServer
from transformers import AutoModelForCausalLM

from rollgym.trainer.checkpoint import latest_checkpoint
from rollgym.trainer.loop import train
from rollgym.trainer.trust_region import StepTrustRegion, step_kl

TOKENS = torch.tensor([[0, 1, 2]])


def _policy() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(4, 5)


def _logps_of(model: torch.nn.Module, batch: dict) -> torch.Tensor:
    logits = model(batch["features"])  # (1, 3, 5): one position per sampled token
    return logits.log_softmax(-1).gather(-1, TOKENS.unsqueeze(-1)).squeeze(-1)


def _one_step(max_kl: float, lr: float) -> dict:
    """One Adam step on a fixed batch under the trust region: the region, what it recorded,
    the model, its optimizer, and the weights and Adam moments from before the step."""
    model = _policy()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    features = torch.randn(1, 3, 4, generator=torch.Generator().manual_seed(1))
    batch = {"features": features, "completion_mask": torch.ones(1, 3)}
    with torch.no_grad():
        batch["old_per_token_logps"] = _logps_of(model, batch)
    # a first step, so the optimizer has moments to restore
    (-_logps_of(model, batch).sum()).backward()
    optimizer.step()
    optimizer.zero_grad()
    with torch.no_grad():
        batch["old_per_token_logps"] = _logps_of(model, batch)
    recorded: list[tuple[str, float]] = []
    region = StepTrustRegion(max_kl, _logps_of, lambda name, value: recorded.append((name, value)))
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    moments = {k: v.clone() for k, v in optimizer.state[model.weight].items()}
    region.before_step(model, optimizer, batch)
    (-_logps_of(model, batch).sum()).backward()
    optimizer.step()
    region.on_optimizer_step(None, None, None, model=model, optimizer=optimizer)
    return {
        "region": region,
        "recorded": dict(recorded),
        "model": model,
        "optimizer": optimizer,
        "weights": weights,
        "moments": moments,
    }


def test_a_step_above_the_bound_is_undone_with_the_optimizer_moments() -> None:
    step = _one_step(max_kl=1e-6, lr=0.5)
    recorded, model = step["recorded"], step["model"]
    assert recorded["trust/step_kl"] > 1e-6 and recorded["trust/step_rejected"] == 1.0
    assert step["region"].rejected == 1
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(tensor, step["weights"][name], rtol=0, atol=0)
    restored = step["optimizer"].state[model.weight]
    for key, value in step["moments"].items():
        torch.testing.assert_close(restored[key], value, rtol=0, atol=0)


def test_a_step_inside_the_bound_stands() -> None:
    step = _one_step(max_kl=10.0, lr=1e-3)
    recorded = step["recorded"]
    assert 0 < recorded["trust/step_kl"] < 10.0 and recorded["trust/step_rejected"] == 0.0
    assert step["region"].rejected == 0
    assert not torch.equal(step["model"].state_dict()["weight"], step["weights"]["weight"])


def test_step_kl_is_zero_for_no_move_and_ignores_masked_tokens() -> None:
    before = torch.tensor([[-1.0, -0.5, -3.0]])
    assert step_kl(before, before, torch.ones(1, 3)) == 0.0
    moved = before + torch.tensor([[0.0, 0.0, 2.0]])
    assert step_kl(before, moved, torch.tensor([[1, 1, 0]])) == 0.0
    assert step_kl(before, moved, torch.ones(1, 3)) > 0.0


def test_the_loop_undoes_every_step_under_a_tiny_bound(tmp_path, default_model_dir) -> None:
    fake = FakeServer()
    lines: list[str] = []
    config = _config(tmp_path, total_steps=3, learning_rate=3e-3, max_step_kl=1e-12)
    result = train(config, fake.client(), default_model_dir, printer=lines.append)

    assert result.steps == 3 and result.undone_steps == 3
    assert [r.alarms["step_rejected"] for r in result.records] == [1.0, 1.0, 1.0]
    assert all(r.alarms["step_kl"] > 1e-12 for r in result.records)
    assert sum(line.startswith("UNDONE step") for line in lines) == 3
    # every step was undone, so the last checkpoint holds the starting weights
    start = AutoModelForCausalLM.from_pretrained(default_model_dir).state_dict()
    for name, tensor in _checkpoint_weights(latest_checkpoint(config.output_dir)).items():
        torch.testing.assert_close(tensor, start[name])


def test_the_loop_keeps_steps_under_a_loose_bound(tmp_path, default_model_dir) -> None:
    fake = FakeServer()
    config = _config(tmp_path, total_steps=2, learning_rate=3e-3, max_step_kl=100.0)
    result = train(config, fake.client(), default_model_dir, printer=None)

    assert result.undone_steps == 0
    assert all(0 < r.alarms["step_kl"] < 100.0 for r in result.records)
    start = AutoModelForCausalLM.from_pretrained(default_model_dir).state_dict()
    final = _checkpoint_weights(latest_checkpoint(config.output_dir))
    assert any(not torch.equal(final[name], start[name]) for name in final)
