"""The precision red line: the server serves below training precision only when admitted."""

from __future__ import annotations

import json
import time

import pytest
import torch
from safetensors.torch import save_file
from server_fakes import ADMIN_TOKEN

from rollgym.contract.precision import (
    VERDICT_FILE,
    PrecisionRun,
    PrecisionVerdict,
    is_lower,
    weights_fingerprint,
)
from rollgym.engine.config import EngineConfig
from rollgym.engine.precision import admitted_verdict, serving_precision
from rollgym.evaluation.measure import judge
from rollgym.server.config import ServerSettings


@pytest.fixture
def model_dir(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"dtype": "bfloat16"}))
    save_file({"w": torch.ones(4)}, str(folder / "model.safetensors"))
    return folder


def run(precision: str, wins: int, tokens_per_s: float = 100.0) -> PrecisionRun:
    return PrecisionRun(
        precision=precision,
        episodes=200,
        successes=wins,
        low=max(0, wins / 200 - 0.06),
        high=min(1, wins / 200 + 0.06),
        mean_reward=0.0,
        tokens_per_s=tokens_per_s,
    )


def write_verdict(model_dir, *, wins: int = 159, candidate: str = "bfloat16") -> PrecisionVerdict:
    verdict = judge(
        run("float32", 160),
        run(candidate, wins, 150.0),
        red_line_points=2.0,
        weights=weights_fingerprint(model_dir),
        env_id="e",
        seeds=[1, 2],
    )
    (model_dir / VERDICT_FILE).write_text(verdict.model_dump_json())
    return verdict


def settings(model_dir, **engine) -> ServerSettings:
    return ServerSettings(
        admin_token=ADMIN_TOKEN, engine=EngineConfig(model_dir=model_dir, **engine)
    )


def test_the_training_precision_needs_no_verdict(model_dir) -> None:
    assert admitted_verdict(EngineConfig(model_dir=model_dir)) is None
    bf16 = EngineConfig(model_dir=model_dir, dtype="bfloat16", training_dtype="bfloat16")
    assert admitted_verdict(bf16) is None


def test_a_lower_precision_without_a_verdict_is_refused_with_the_command(model_dir) -> None:
    with pytest.raises(ValueError, match=r"rollgym eval --model .* --precision bfloat16"):
        settings(model_dir, dtype="bfloat16")
    with pytest.raises(ValueError, match="missing"):
        settings(model_dir, dtype="auto")  # the model's own dtype is bfloat16


def test_an_admitted_verdict_lets_the_server_serve_it(model_dir) -> None:
    written = write_verdict(model_dir)
    assert written.admitted and written.speedup == pytest.approx(1.5)
    assert settings(model_dir, dtype="bfloat16").engine.dtype == "bfloat16"
    assert admitted_verdict(EngineConfig(model_dir=model_dir, dtype="bfloat16")) == written


def test_a_drop_past_the_red_line_is_refused(model_dir) -> None:
    verdict = write_verdict(model_dir, wins=150)  # 80% -> 75%: 5 points
    assert not verdict.admitted and verdict.drop_points == pytest.approx(5.0)
    with pytest.raises(ValueError, match=r"dropped 5\.0 points"):
        settings(model_dir, dtype="bfloat16")


def test_the_verdict_is_for_these_weights_and_this_precision(model_dir) -> None:
    write_verdict(model_dir, candidate="float16")
    with pytest.raises(ValueError, match="float16 with float32"):
        settings(model_dir, dtype="bfloat16")
    write_verdict(model_dir)
    time.sleep(0.01)
    save_file({"w": torch.zeros(4)}, str(model_dir / "model.safetensors"))  # trained further
    with pytest.raises(ValueError, match="other weights"):
        settings(model_dir, dtype="bfloat16")


def test_fp8_counts_as_lower_than_either() -> None:
    assert is_lower("fp8", "float32") and is_lower("fp8", "bfloat16")
    assert not is_lower("bfloat16", "float16")


def test_serving_precision_names_fp8_and_auto(model_dir) -> None:
    assert serving_precision(EngineConfig(model_dir=model_dir, quantization="fp8")) == "fp8"
    assert serving_precision(EngineConfig(model_dir=model_dir, dtype="auto")) == "bfloat16"


def test_the_drop_interval_is_printed_in_points() -> None:
    verdict = judge(
        run("float32", 160),
        run("bfloat16", 156),
        red_line_points=2.0,
        weights="w",
        env_id="e",
        seeds=[],
    )
    assert verdict.drop_low < verdict.drop_points < verdict.drop_high
    assert verdict.admitted  # 2.0 points: on the line, not past it
