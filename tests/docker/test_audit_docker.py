"""``rollgym audit`` over every built-in env and example Harbor tasks on real containers,
as a user runs it: the command in a process of its own, its own one-box Docker pool, exit
status 0 and a table with no crossing. A new built-in env is audited here as soon as it
is registered; of the example tasks, two whose tests differ (a shell answer file, a
Python program's output), to keep the tier's time modest."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rollgym.envs.registration import BUILTIN_IDS
from rollgym.tasks.build import build_tasks

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"
TASKS = ("count-words", "repair-json-config")


def audit(env_id: str, *options: str) -> list[str]:
    run = subprocess.run(
        [sys.executable, "-m", "rollgym.cli", "audit", env_id, *options, "--episodes", "1"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert lines[0] == f"rollgym audit {env_id} (1 episode per attack)"
    return lines


@pytest.mark.parametrize("env_id", BUILTIN_IDS)
def test_every_built_in_env_passes_the_audit(env_id: str, docker_client) -> None:
    lines = audit(env_id)
    assert lines[-1] == "no crossing" and len(lines) == 9
    assert all(int(line.split()[-2]) > 0 for line in lines[2:8])  # every attack attempted


@pytest.fixture(scope="module")
def example_images(docker_client) -> None:
    assert all(r.outcome != "failed" for r in build_tasks(EXAMPLES, progress=lambda line: None))


@pytest.mark.parametrize("task", TASKS)
def test_example_harbor_tasks_pass_the_audit(task: str, example_images) -> None:
    kwargs = json.dumps({"tasks_dir": str(EXAMPLES), "task": task})
    lines = audit("harbor/Tasks-v0", "--env-kwargs", kwargs)
    assert lines[-1] == "no crossing" and len(lines) == 9
