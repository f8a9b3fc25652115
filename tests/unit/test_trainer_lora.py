"""LoRA training (``trainer.lora``) against the fake server: TRL, peft and the tiny default
model, no engine. The pushes are the merged weights under the base checkpoint's names, the
checkpoints hold the adapter, and the export folds it back into an ordinary model."""

from __future__ import annotations

import weakref
from pathlib import Path

import pytest
import torch
from peft import PeftModel, get_peft_model
from trainer_fakes import FakeServer, fast_config
from transformers import AutoModelForCausalLM

from rollgym.cli import main
from rollgym.trainer.checkpoint import latest_checkpoint
from rollgym.trainer.config import TrainerConfig, parse_config
from rollgym.trainer.errors import TrainerConfigError
from rollgym.trainer.loop import train
from rollgym.trainer.lora import (
    LoraSettings,
    MergedWeight,
    export_merged,
    is_adapter_dir,
    merged_tensors,
)
from rollgym.trainer.weights import SafetensorsBody


def _config(tmp_path: Path, **values) -> TrainerConfig:
    defaults = dict(
        total_steps=2,
        learning_rate=5e-2,
        max_staleness=0,
        lora=LoraSettings(rank=4, target_modules=["q_proj", "v_proj"]),
    )
    return fast_config(tmp_path / "run", **{**defaults, **values})


def _adapted(model_dir: Path) -> PeftModel:
    """The model under rank-4 adapters that add something (peft starts ``B`` at zero)."""
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(model_dir), LoraSettings(rank=4).peft_config()
    )
    for name, param in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.5)
    return model


def test_merged_tensors_equal_peft_merge_and_leave_the_model_as_it_was(default_model_dir) -> None:
    model = _adapted(default_model_dir)
    before = {k: v.clone() for k, v in model.named_parameters()}
    served = {k: v.clone() for k, v in merged_tensors(model).items()}
    for name, param in model.named_parameters():  # the training model is left as it was
        torch.testing.assert_close(param, before[name], msg=name)
    untouched = [k for k in served if f"base_model.model.{k}" in before]  # no adapter there
    assert untouched and len(untouched) < len(served)
    for name in untouched:
        torch.testing.assert_close(served[name], before[f"base_model.model.{name}"])

    expected = dict(model.merge_and_unload().named_parameters())
    assert served.keys() == expected.keys()
    for name, tensor in expected.items():
        torch.testing.assert_close(served[name], tensor, msg=name)
    assert not torch.equal(
        served["model.layers.0.self_attn.q_proj.weight"],
        before["base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight"],
    )


def test_a_merged_push_sends_the_merged_file_making_one_merged_weight_at_a_time(
    default_model_dir, monkeypatch
) -> None:
    model = _adapted(default_model_dir)
    expected = b"".join(SafetensorsBody(merged_tensors(model)))
    made: list[weakref.ref[torch.Tensor]] = []
    most_alive = 0
    make = MergedWeight.tensor

    def recorded(self: MergedWeight) -> torch.Tensor:
        tensor = make(self)
        made.append(weakref.ref(tensor))
        return tensor

    monkeypatch.setattr(MergedWeight, "tensor", recorded)
    body = SafetensorsBody.of(model)
    assert not made  # nothing merged until it is sent
    sent = bytearray()
    for part in body:
        sent += part
        most_alive = max(most_alive, sum(ref() is not None for ref in made))
    assert bytes(sent) == expected and len(body) == len(expected)
    assert len(made) == 7 * model.config.num_hidden_layers  # every adapted layer, once
    assert most_alive == 1


def test_a_lora_run_pushes_merged_weights_and_checkpoints_the_adapter(
    tmp_path, default_model_dir
) -> None:
    fake = FakeServer(version=0)
    config = _config(tmp_path)
    result = train(config, fake.client(), default_model_dir, printer=None)

    assert result.steps == 2 and fake.version == 3 == result.policy_version
    base = dict(AutoModelForCausalLM.from_pretrained(default_model_dir).named_parameters())
    first, last = fake.weights[0], fake.weights[-1]
    assert first.keys() == last.keys() == base.keys()  # the server's names, no lora_* tensors
    changed = {k for k in base if not torch.equal(last[k], base[k].detach())}
    assert changed and all(".q_proj." in k or ".v_proj." in k for k in changed)
    for name in base:  # the first push is the base itself: peft starts B at zero
        torch.testing.assert_close(first[name], base[name].detach())

    checkpoint = latest_checkpoint(config.output_dir)
    assert checkpoint is not None and is_adapter_dir(checkpoint)
    assert (checkpoint / "adapter_model.safetensors").is_file()
    assert not (checkpoint / "model.safetensors").exists()  # the adapter only

    exported = export_merged(checkpoint, tmp_path / "final", base_model=Path(default_model_dir))
    final = AutoModelForCausalLM.from_pretrained(exported)
    for name, tensor in final.named_parameters():
        torch.testing.assert_close(tensor.detach(), last[name], msg=name)
    assert (exported / "tokenizer_config.json").is_file()


def test_a_run_that_serves_adapters_pushes_the_adapter_alone(tmp_path, default_model_dir) -> None:
    """``serve='adapter'``: each push is the adapter in peft's names, its shape in the file's
    metadata (the server's check: tests/unit/test_server_adapter_updates.py; vLLM serving
    it: tests/engine/test_lora_serving.py)."""
    from safetensors.torch import load_file

    from rollgym.contract.adapter import ADAPTER_METADATA, AdapterShape

    fake = FakeServer(version=0)
    lora = LoraSettings(rank=4, target_modules=["q_proj", "v_proj"], serve="adapter")
    config = _config(tmp_path, lora=lora, canary=None)
    result = train(config, fake.client(), default_model_dir, printer=None)

    assert result.steps == 2 and fake.version == 3
    shapes = {AdapterShape.model_validate_json(m[ADAPTER_METADATA]) for m in fake.metadata}
    assert shapes == {AdapterShape(rank=4, alpha=8, target_modules=("q_proj", "v_proj"))}
    last = fake.weights[-1]
    assert last and all(k.startswith("base_model.model.") and ".lora_" in k for k in last)
    saved = load_file(latest_checkpoint(config.output_dir) / "adapter_model.safetensors")
    assert saved.keys() == last.keys()
    for name, tensor in saved.items():  # the last push is the checkpointed adapter
        torch.testing.assert_close(last[name], tensor, msg=name)
    with pytest.raises(ValueError, match="up to rank 512"):
        LoraSettings(rank=600, serve="adapter")


def test_only_the_adapters_train(tmp_path, default_model_dir, monkeypatch) -> None:
    trained: list[set[str]] = []
    from rollgym.trainer import grpo

    original = grpo.ServerGRPOTrainer.create_optimizer

    def spy(self):
        optimizer = original(self)
        names = {id(p): n for n, p in self.model.named_parameters()}
        trained.append({names[id(p)] for g in optimizer.param_groups for p in g["params"]})
        return optimizer

    monkeypatch.setattr(grpo.ServerGRPOTrainer, "create_optimizer", spy)
    train(_config(tmp_path, total_steps=1), FakeServer().client(), default_model_dir, printer=None)
    assert trained and trained[0] and all(".lora_" in name for name in trained[0])


def test_bad_lora_settings_say_which_field(tmp_path) -> None:
    with pytest.raises(TrainerConfigError, match=r"lora\.rank"):
        parse_config(TrainerConfig, output_dir=tmp_path, lora={"rank": 0})
    with pytest.raises(TrainerConfigError, match=r"lora\.target_modules"):
        parse_config(TrainerConfig, output_dir=tmp_path, lora={"target_modules": []})


def test_export_refuses_a_directory_without_an_adapter(tmp_path, default_model_dir) -> None:
    with pytest.raises(FileNotFoundError, match="no LoRA adapter"):
        export_merged(Path(default_model_dir), tmp_path / "out")


def test_a_resumed_lora_run_serves_the_checkpointed_adapter(tmp_path, default_model_dir) -> None:
    first_server = FakeServer(version=0)
    train(_config(tmp_path), first_server.client(), default_model_dir, printer=None)

    # a server at another version: the resumed trainer pushes its restored weights first
    second_server = FakeServer(version=50)
    result = train(
        _config(tmp_path, total_steps=3), second_server.client(), default_model_dir, printer=None
    )
    assert result.resumed_from is not None and result.steps == 3
    restored, trained_on = second_server.weights[0], first_server.weights[-1]
    for name, tensor in trained_on.items():
        torch.testing.assert_close(restored[name], tensor, msg=name)
    assert any(not torch.equal(second_server.weights[-1][k], trained_on[k]) for k in trained_on)


def test_the_export_command_merges_a_checkpoint(tmp_path, default_model_dir, capsys) -> None:
    config = _config(tmp_path, total_steps=1)
    fake = FakeServer()
    train(config, fake.client(), default_model_dir, printer=None)
    checkpoint = latest_checkpoint(config.output_dir)
    out = tmp_path / "merged"

    assert main(["model", "export", str(checkpoint), "--out", str(out)]) == 0
    merged = AutoModelForCausalLM.from_pretrained(out)
    for name, tensor in merged.named_parameters():
        torch.testing.assert_close(tensor.detach(), fake.weights[-1][name], msg=name)
    assert main(["model", "export", str(default_model_dir), "--out", str(out)]) == 2
    assert "no LoRA adapter" in capsys.readouterr().out


def test_a_lora_warm_start_saves_an_ordinary_model_changed_where_the_adapters_were(
    tmp_path, default_model_dir
) -> None:
    from rollgym.run.demos import GuessDemos
    from rollgym.run.warmstart import WarmStartConfig, warm_start

    config = WarmStartConfig(
        demos=GuessDemos(oracle_episodes=16, imperfect_episodes=0, drill_episodes=0),
        epochs=1.0,
        batch_size=8,
        lora=LoraSettings(rank=4, target_modules=["q_proj", "v_proj"]),
    )
    out = warm_start(config, Path(default_model_dir), tmp_path / "warm")

    assert not is_adapter_dir(out)
    base = dict(AutoModelForCausalLM.from_pretrained(default_model_dir).named_parameters())
    warm = dict(AutoModelForCausalLM.from_pretrained(out).named_parameters())
    assert warm.keys() == base.keys()
    changed = {k for k in base if not torch.equal(warm[k], base[k])}
    assert changed and all(".q_proj.weight" in k or ".v_proj.weight" in k for k in changed)
