"""Sandbox and pool configuration: hardened defaults, validated once, clear errors."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rollgym.sandboxes.config import PoolConfig, SandboxConfig


def test_defaults_are_hardened() -> None:
    config = SandboxConfig()
    assert config.network == "none"
    assert config.uid > 0 and config.gid > 0
    assert config.memory_mb > 0 and config.pids_limit > 0 and config.cpus > 0


def test_a_network_is_only_there_when_asked_for_by_name() -> None:
    assert SandboxConfig(network="bridge").network == "bridge"
    with pytest.raises(ValidationError, match="network"):
        SandboxConfig(network="host")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "complaint"),
    [
        ({"uid": 0}, "uid"),
        ({"memory_mb": 4}, "memory_mb"),
        ({"command_timeout_s": 0}, "command_timeout_s"),
        ({"environment": {"HOME": "/root"}}, "set by the sandbox"),
        ({"privileged": True}, "Extra inputs are not permitted"),
    ],
)
def test_bad_settings_are_refused_with_the_reason(changes: dict, complaint: str) -> None:
    with pytest.raises(ValidationError, match=complaint):
        SandboxConfig(**changes)


def test_overrides_are_validated_and_leave_the_original_alone() -> None:
    base = SandboxConfig()
    custom = base.with_overrides(memory_mb=1024, environment={"TASK": "x"})
    assert (custom.memory_mb, custom.environment) == (1024, {"TASK": "x"})
    assert base.memory_mb != 1024
    with pytest.raises(ValidationError):
        base.with_overrides(pids_limit=1)


def test_pool_config_guards_socket_paths_and_reserved_labels() -> None:
    with pytest.raises(ValidationError, match="absolute"):
        PoolConfig(runtime_dir="relative/dir")
    with pytest.raises(ValidationError, match="108 bytes"):
        PoolConfig(runtime_dir="/" + "x" * 80)
    with pytest.raises(ValidationError, match="reserved"):
        PoolConfig(labels={"rollgym.pool": "mine"})
    assert PoolConfig(labels={"team": "rl"}).labels == {"team": "rl"}


def test_configs_are_frozen() -> None:
    with pytest.raises(ValidationError):
        SandboxConfig().memory_mb = 1  # type: ignore[misc]
