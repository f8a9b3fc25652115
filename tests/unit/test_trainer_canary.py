"""The served-weights canary's trainer side against the fake server, which scores the
probes with transformers on the weights it serves (the real server scores them with vLLM:
tests/engine/test_server_engine.py). Each push sends probes; a server that serves the
previous push's weights (an update applied but never served) makes the canary fire."""

from __future__ import annotations

from pathlib import Path

import pytest
from trainer_fakes import FakeServer, fast_config

from rollgym.trainer.canary import CanaryConfig, canary_probes, probe_ids
from rollgym.trainer.config import TrainerConfig
from rollgym.trainer.errors import ServedWeightsMismatch
from rollgym.trainer.loop import train
from rollgym.trainer.lora import LoraSettings


def _config(tmp_path: Path, **values) -> TrainerConfig:
    defaults = dict(total_steps=2, learning_rate=5e-2, max_staleness=0)
    return fast_config(tmp_path / "run", **{**defaults, **values})


@pytest.mark.parametrize("lora", [None, LoraSettings(rank=4)], ids=["full", "lora"])
def test_every_push_is_checked_and_a_served_model_passes(tmp_path, default_model_dir, lora):
    fake = FakeServer()
    lines: list[str] = []
    result = train(
        _config(tmp_path, lora=lora), fake.client(), default_model_dir, printer=lines.append
    )
    mismatches = [r.alarms["served_weights_mismatch"] for r in result.records]
    assert len(mismatches) == 2 and all(m < 1e-4 for m in mismatches)
    assert not any("SERVED WEIGHTS MISMATCH" in line for line in lines)
    assert [r.alarms["served_weights_mismatch"] for r in fake.reports] == mismatches


def test_weights_applied_but_not_served_raise_the_alarm(tmp_path, default_model_dir) -> None:
    fake = FakeServer()
    fake.serving_lag = 1  # every update after the first: the server still serves the last one
    lines: list[str] = []
    result = train(_config(tmp_path), fake.client(), default_model_dir, printer=lines.append)
    alarms = [line for line in lines if line.startswith("SERVED WEIGHTS MISMATCH")]
    assert [line.split(":")[0] for line in alarms] == [
        "SERVED WEIGHTS MISMATCH at version 2",
        "SERVED WEIGHTS MISMATCH at version 3",
    ]
    assert all(r.alarms["served_weights_mismatch"] > 0.02 for r in result.records)


def test_the_stop_setting_ends_the_run_at_the_first_mismatch(tmp_path, default_model_dir):
    fake = FakeServer()
    fake.serving_lag = 1
    config = _config(tmp_path, canary=CanaryConfig(stop_on_mismatch=True))
    with pytest.raises(ServedWeightsMismatch, match="at version 2"):
        train(config, fake.client(), default_model_dir, printer=None)
    assert fake.version == 2  # the start's push and step 1's: step 2 never ran


def test_a_server_that_checks_nothing_is_named_once(tmp_path, default_model_dir) -> None:
    fake = FakeServer()
    fake.scores_canary = False
    lines: list[str] = []
    result = train(_config(tmp_path), fake.client(), default_model_dir, printer=lines.append)
    unchecked = [line for line in lines if "answers no canary verdict" in line]
    assert len(unchecked) == 1 and len(fake.weights) == 3  # three pushes, one notice
    assert all("served_weights_mismatch" not in r.alarms for r in result.records)


def test_no_canary_sends_no_probes(tmp_path, default_model_dir) -> None:
    fake = FakeServer()
    result = train(_config(tmp_path, canary=None), fake.client(), default_model_dir, printer=None)
    assert all("served_weights_mismatch" not in r.alarms for r in result.records)


def test_probes_are_the_same_at_every_push_and_scored_by_the_pushed_model(default_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(default_model_dir)
    config = CanaryConfig(probes=3, probe_tokens=8, seed=4)
    probes = canary_probes(model, config)
    assert [p.token_ids for p in probes.probes] == probe_ids(config, model.config.vocab_size)
    assert len(probes.probes) == 3 and all(len(p.logprobs) == 7 for p in probes.probes)
    training = model.train()
    assert canary_probes(training, config) == probes and training.training  # mode kept
