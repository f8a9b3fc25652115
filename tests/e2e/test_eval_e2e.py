"""``rollgym eval`` as a user runs it against a real ``rollgym serve`` on the default model:
success and pass@k on held-out seeds, and one line for a model the server cannot take."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rollgym.models.tiny import ModelSpec, build_model
from rollgym.run.server_process import ENGINE_ENV, ServerProcess

SEEDS, SAMPLES = 12, 3


@pytest.fixture(scope="module")
def server(tmp_path_factory, default_model_dir) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("eval-server")
    settings = {"ROLLGYM_ENGINE__MAX_MODEL_LEN": "512"}
    with ServerProcess(model_dir=default_model_dir, data_dir=data, settings=settings) as server:
        yield server


def rollgym_eval(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **ENGINE_ENV, "ROLLGYM_ADMIN_TOKEN": server.admin_token}
    return subprocess.run(
        [sys.executable, "-m", "rollgym.cli", "eval", "--server", server.url, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_success_and_pass_at_k_through_the_server(server) -> None:
    args = ("--episodes", str(SEEDS), "--samples", str(SAMPLES), "--json")
    done = rollgym_eval(server, *args)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout)
    assert figures["seeds"] == SEEDS and figures["samples_per_seed"] == SAMPLES
    success, passed = figures["success"], figures[f"pass@{SAMPLES}"]
    assert success["episodes"] + figures["infra_failures"] == SEEDS * SAMPLES
    assert passed["episodes"] <= SEEDS
    assert passed["rate"] >= success["rate"] - 1e-9  # a seed solved once counts for pass@k
    assert 0 <= passed["low"] <= passed["rate"] <= passed["high"] <= 1


def test_a_model_the_server_cannot_serve_is_one_line(server, tmp_path: Path) -> None:
    model = build_model(ModelSpec.smallest(), tmp_path / "other")  # not the served shape
    done = rollgym_eval(server, "--model", str(model), "--episodes", "2")
    assert done.returncode == 2 and done.stdout == ""
    assert "refused" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_kwargs_the_env_refuses_in_an_engine_of_its_own_are_one_line(default_model_dir) -> None:
    """Without --server the env is made beside an engine in this process; the kwargs it
    refuses (here GuessNumber's, on Compute) end in one line, not a traceback."""
    args = ("--model", str(default_model_dir), "--env", "rollgym/Compute-v0", "--episodes", "1")
    done = subprocess.run(
        [sys.executable, "-m", "rollgym.cli", "eval", *args, "--env-kwargs", '{"low": 1}'],
        env={**os.environ, **ENGINE_ENV},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 2, (done.stdout + done.stderr)[-3000:]
    assert "rollgym/Compute-v0 cannot be made with env_kwargs ['low']" in done.stderr
    assert "Traceback" not in done.stderr
