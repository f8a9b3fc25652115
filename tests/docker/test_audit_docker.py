"""``rollgym audit`` over every built-in env on real containers, as a user runs it: the
command in a process of its own, its own one-box Docker pool, exit status 0 and a table
with no crossing. A new built-in env is audited here as soon as it is registered."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rollgym.envs.registration import BUILTIN_IDS


@pytest.mark.parametrize("env_id", BUILTIN_IDS)
def test_every_built_in_env_passes_the_audit(env_id: str, docker_client) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "rollgym.cli", "audit", env_id, "--episodes", "1"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert lines[0] == f"rollgym audit {env_id} (1 episode per attack)"
    assert lines[-1] == "no crossing" and len(lines) == 9
    assert all(int(line.split()[-2]) > 0 for line in lines[2:8])  # every attack attempted
