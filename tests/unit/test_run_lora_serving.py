"""``rollgym run`` with ``trainer.lora.serve='adapter'`` starts its server so that it serves
what the trainer pushes: adapters up to the run's rank (the real run: tests/e2e's
test_trainer_e2e.py drives the same settings through a real server)."""

from __future__ import annotations

import contextlib
from typing import ClassVar

import pytest

from rollgym.run import pipeline
from rollgym.run.pipeline import RunConfig
from rollgym.trainer.lora import LoraSettings


class CapturedServer:
    started: ClassVar[list[dict[str, str]]] = []

    def __init__(self, *, settings: dict[str, str], **_: object):
        self.started.append(dict(settings))

    def __enter__(self) -> CapturedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def client_config(self) -> None:
        return None


@pytest.mark.parametrize(
    ("lora", "served"),
    [
        (None, None),
        (LoraSettings(rank=4), None),
        (LoraSettings(rank=4, serve="adapter"), "8"),
        (LoraSettings(rank=16, serve="adapter"), "16"),
    ],
)
def test_the_runs_server_serves_adapters_exactly_when_the_trainer_pushes_them(
    monkeypatch, tmp_path, lora, served
) -> None:
    monkeypatch.setattr(pipeline, "ServerProcess", CapturedServer)
    CapturedServer.started.clear()
    config = RunConfig(run_dir=tmp_path)
    config = config.model_copy(update={"trainer": config.trainer.model_copy(update={"lora": lora})})
    with contextlib.ExitStack() as stack:
        stack.enter_context(pipeline._rollout_server(config, config.model_dir, printer=print))
    (settings,) = CapturedServer.started
    assert settings.get("ROLLGYM_ENGINE__LORA__MAX_RANK") == served
