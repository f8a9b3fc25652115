"""Server settings: flags over ROLLGYM_* variables over defaults, validated once."""

from __future__ import annotations

import argparse
import socket

import pytest
from pydantic import ValidationError

from rollgym.server.config import ServerSettings
from rollgym.server.serve import add_arguments, overrides, serve

TOKEN = "a-token-long-enough"


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_flags_override_the_environment_and_nest_per_component(
    monkeypatch, tmp_path, default_model_dir
) -> None:
    monkeypatch.setenv("ROLLGYM_ADMIN_TOKEN", TOKEN)
    monkeypatch.setenv("ROLLGYM_PORT", "9001")
    monkeypatch.setenv("ROLLGYM_ENGINE__IN_FLIGHT", "abort")
    monkeypatch.setenv("ROLLGYM_BUFFER__LEASE_TIMEOUT_S", "12.5")
    args = parse(
        "--port", "9002", "--model-dir", str(default_model_dir), "--data-dir", str(tmp_path)
    )
    settings = ServerSettings(**overrides(args))
    assert settings.port == 9002 and settings.admin_token.get_secret_value() == TOKEN
    assert settings.engine.model_dir == default_model_dir
    assert settings.engine.in_flight == "abort"  # the env's, kept beside the flag's model dir
    assert settings.buffer.lease_timeout_s == 12.5
    assert settings.buffer_path == tmp_path / "buffer.sqlite3"


def test_bad_settings_say_what_is_wrong(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("ROLLGYM_ADMIN_TOKEN", raising=False)
    with pytest.raises(ValidationError, match="admin_token"):
        ServerSettings()
    with pytest.raises(ValidationError, match="at least 16 characters"):
        ServerSettings(admin_token="short")
    with pytest.raises(ValidationError, match="rollgym model init"):
        ServerSettings(admin_token=TOKEN, engine={"model_dir": str(tmp_path)})
    with pytest.raises(ValidationError, match="extra"):
        ServerSettings(admin_token=TOKEN, engine={"modle_dir": str(tmp_path)})


def test_a_busy_port_fails_before_the_engine_loads(
    monkeypatch, tmp_path, default_model_dir, capsys
) -> None:
    monkeypatch.setenv("ROLLGYM_ADMIN_TOKEN", TOKEN)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        args = parse("--port", str(port), "--model-dir", str(default_model_dir))
        monkeypatch.setattr("rollgym.server.app.create_app", _no_engine_please)
        assert serve(args) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().out


def _no_engine_please(settings: object) -> None:
    raise AssertionError("the app (and its engine) was built although the port is taken")


def _compose_environment(service: str, given: dict[str, str]) -> dict[str, str]:
    """``service``'s environment in compose.yaml, its ``${VAR:-default}`` and ``${VAR:?}``
    resolved as Compose does with ``given`` as the host's variables."""
    import re
    from pathlib import Path

    import yaml

    compose = yaml.safe_load((Path(__file__).parents[2] / "compose.yaml").read_text())
    pattern = re.compile(r"\$\{(\w+)(?::([-?])([^}]*))?\}")

    def value(match: re.Match[str]) -> str:
        name, kind, default = match.groups()
        if name in given:
            return given[name]
        assert kind == "-", f"compose needs {name}: {default}"
        return default

    environment = compose["services"][service]["environment"]
    return {key: pattern.sub(value, str(raw)) for key, raw in environment.items()}


def test_the_gpu_profiles_server_settings_start_without_a_precision_verdict(
    monkeypatch, tmp_path, default_model_dir
) -> None:
    """The gpu profile once served bfloat16 under float32 training and so refused to start;
    its settings now pass the precision red line as they are (the CPU-checkable part: the
    engine's dtype is what every engine test serves)."""
    hosts = {"ROLLGYM_ADMIN_TOKEN": TOKEN, "ROLLGYM_AGENT_KEY": "an-agent-key-long-enough"}
    for key, value in _compose_environment("server-gpu", hosts).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("ROLLGYM_DATA_DIR", str(tmp_path))  # /data in the container
    monkeypatch.setenv("ROLLGYM_ENGINE__MODEL_DIR", str(default_model_dir))
    settings = ServerSettings()
    assert settings.engine.dtype == settings.engine.training_dtype == "float32"
    monkeypatch.setenv("ROLLGYM_ENGINE__DTYPE", "bfloat16")  # ROLLGYM_GPU_DTYPE=bfloat16
    with pytest.raises(ValidationError, match=r"rollgym eval .* --precision bfloat16"):
        ServerSettings()


@pytest.mark.parametrize("trainer", ["trainer", "trainer-cluster", "trainer-gpu"])
def test_composes_trainers_train_the_model_their_server_makes(trainer) -> None:
    """The servers serve what ``rollgym model init`` made on the volume, and a trainer's
    pushed weights must fit it: the built-in run's SmolLM2 would not (it is pulled, not
    made), so compose's trainers run a preset on the made model."""
    from pathlib import Path

    import yaml

    from rollgym.cli import _build_parser
    from rollgym.contract import paths
    from rollgym.run.commands import run_config_values
    from rollgym.run.pipeline import RunConfig
    from rollgym.trainer.config import parse_config

    compose = yaml.safe_load((Path(__file__).parents[2] / "compose.yaml").read_text())
    command = compose["services"][trainer]["command"]
    config = parse_config(RunConfig, **run_config_values(_build_parser().parse_args(command)))
    assert config.model_dir == paths.default_model_dir()
    assert config.task.env_id == "rollgym/Compute-v0"  # the tool task, boxes in the loop
    assert config.warmstart is not None and config.server_url is not None
