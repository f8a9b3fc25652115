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
