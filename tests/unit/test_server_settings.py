"""Server settings: flags over ROLLGYM_* variables over defaults, validated once."""

from __future__ import annotations

import argparse

import pytest
from pydantic import ValidationError

from server.config import ServerSettings
from server.serve import add_arguments, overrides

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
