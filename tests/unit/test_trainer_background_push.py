"""Pushes that overlap training (``trainer.background_push``) against the fake server: the
server gets every version in order, checkpoints record landed versions, the pushed weights
are those of the step that pushed them, and the window counts a pending push's version."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch
from trainer_fakes import FakeServer, fast_config
from transformers import AutoModelForCausalLM

from rollgym.trainer.background_push import BackgroundPush
from rollgym.trainer.checkpoint import latest_checkpoint, read_state
from rollgym.trainer.config import TrainerConfig, parse_config
from rollgym.trainer.errors import TrainerConfigError
from rollgym.trainer.loop import train
from rollgym.trainer.weights import WeightPusher


def _config(tmp_path: Path, **values) -> TrainerConfig:
    defaults = dict(total_steps=3, learning_rate=1e-3, max_staleness=1, background_push=True)
    return fast_config(tmp_path / "run", **{**defaults, **values})


def test_a_background_run_lands_every_push_in_order(tmp_path, default_model_dir) -> None:
    fake = FakeServer(version=4)
    config = _config(tmp_path)
    result = train(config, fake.client(), default_model_dir, printer=None)

    assert result.steps == 3 and fake.version == 8 == result.policy_version
    assert len(fake.weights) == 4
    checkpoint = latest_checkpoint(config.output_dir)
    assert checkpoint is not None and read_state(checkpoint).policy_version == 8
    final = AutoModelForCausalLM.from_pretrained(checkpoint)
    for name, tensor in final.named_parameters():  # the last push is the last step's weights
        torch.testing.assert_close(fake.weights[-1][name], tensor.detach())
    assert [r.policy_version for r in result.records] == [6, 7, 8]  # each step's own push
    # the push landed during each step is timed (step 1: the start's, steps 2-3: the last
    # step's), and the waits are part of the step's blocked time
    assert all(r.push_s > 0 and 0 <= r.push_wait_s <= r.sync_s for r in result.records)
    # a push's canary verdict comes with the next step's record (the last one at the end)
    assert all(r.alarms["served_weights_mismatch"] < 1e-4 for r in result.records)


def test_the_snapshot_is_the_submitting_steps_weights_not_later_ones(default_model_dir) -> None:
    """Training goes on while the upload runs: the push must send the weights of the
    moment it was submitted."""
    fake = FakeServer()
    release = threading.Event()
    send = WeightPusher.send

    def slow_send(self, push):  # the upload starts only once training changed the weights
        release.wait(timeout=10)
        return send(self, push)

    model = AutoModelForCausalLM.from_pretrained(default_model_dir)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    pusher = WeightPusher(fake.client(), version=0)
    background = BackgroundPush(pusher)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(WeightPusher, "send", slow_send)
        background.submit(model)
        assert background.trainer_version == 1 and pusher.version == 0
        with torch.no_grad():
            for param in model.parameters():
                param.add_(1.0)  # the next optimizer step, in place
        release.set()
        sync = background.wait()
    background.close()
    assert sync is not None and sync.policy_version == 1 == pusher.version
    for name, tensor in before.items():
        torch.testing.assert_close(fake.weights[0][name], tensor)


def test_a_failed_background_push_raises_at_the_next_wait(default_model_dir) -> None:
    fake = FakeServer(version=3)
    model = AutoModelForCausalLM.from_pretrained(default_model_dir)
    background = BackgroundPush(WeightPusher(fake.client(), version=1))  # not the server's
    background.submit(model)
    from rollgym.trainer.errors import VersionConflict

    with pytest.raises(VersionConflict):
        background.wait()
    background.close()


def test_background_push_needs_an_asynchronous_window(tmp_path) -> None:
    with pytest.raises(TrainerConfigError, match="background_push needs max_staleness >= 1"):
        parse_config(TrainerConfig, output_dir=tmp_path, max_staleness=0, background_push=True)
