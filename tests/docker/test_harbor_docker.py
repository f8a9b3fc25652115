"""Harbor tasks on the real engine: ``rollgym tasks build`` and ``check`` over the examples,
and bad input (a registry image, a failing build, a system WORKDIR, a verifier that hangs
or writes garbage) answered with a clear error, never a score."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import gymnasium
import pytest

from rollgym.envs.harbor import register
from rollgym.sandboxes.config import ImagePoolConfig
from rollgym.sandboxes.docker import DockerImagePool
from rollgym.tasks.build import BuildConfig, build_tasks
from rollgym.tasks.errors import TasksError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"


def rollgym(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rollgym.cli", *args], capture_output=True, text=True, timeout=600
    )


@pytest.fixture
def task(tmp_path: Path) -> Path:
    """A copy of one example task, to break."""
    target = tmp_path / "tasks" / "count-words"
    shutil.copytree(EXAMPLES / "count-words", target)
    return target


def test_tasks_check_passes_on_every_example() -> None:
    """CI's check: each example's oracle earns 1 and doing nothing earns 0, in real boxes."""
    done = rollgym("tasks", "check", str(EXAMPLES), "--jobs", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "12 tasks ok, 0 failed" in lines
    rows = [line for line in lines if line.endswith("  ok")]
    assert len(rows) == 12 and all(" 1 " in row and " 0 " in row for row in rows)


def test_a_registry_image_is_named_and_a_mapping_builds_it_locally(task: Path) -> None:
    (task / "environment" / "Dockerfile").write_text(
        "FROM python:3.11-slim\nWORKDIR /app\nCOPY files/ /app/\n"
    )
    lines: list[str] = []
    (result,) = build_tasks(task.parent, progress=lines.append)
    assert result.outcome == "failed"
    assert result.error is not None
    assert (
        "environment/Dockerfile line 1: FROM python:3.11-slim is not a local image" in result.error
    )
    assert "--map python:3.11-slim=rollgym/base:bookworm" in result.error
    mapped = BuildConfig(images={"python:3.11-slim": "rollgym/base:bookworm"})
    (result,) = build_tasks(task.parent, mapped, progress=lines.append)
    assert result.outcome in ("built", "cached"), result.error


def test_a_failing_build_names_the_task_and_the_step(task: Path) -> None:
    dockerfile = task / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "RUN echo about to fail && false\n")
    (result,) = build_tasks(task.parent, progress=lambda line: None)
    assert result.outcome == "failed" and result.error is not None
    assert result.error.startswith("task count-words:")
    assert "RUN echo about to fail && false" in result.error


def test_a_workdir_in_a_system_folder_fails_the_build_with_the_reason(task: Path) -> None:
    (task / "environment" / "Dockerfile").write_text(
        "FROM rollgym/base:bookworm\nWORKDIR /etc/app\n"
    )
    (result,) = build_tasks(task.parent, progress=lambda line: None)
    assert result.outcome == "failed" and result.error is not None
    assert "WORKDIR /etc/app is in the system folder /etc" in result.error


def test_a_task_directory_missing_a_file_is_one_line_and_status_2(task: Path) -> None:
    (task / "tests" / "test.sh").unlink()
    done = rollgym("tasks", "build", str(task.parent))
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "rollgym tasks build: task count-words: tests/test.sh (the verifier) is missing"
    )


@pytest.mark.parametrize(
    ("test_sh", "error"),
    [
        ("#!/bin/bash\nsleep 600\n", "the verifier ran past its 2 s"),
        ("#!/bin/bash\necho PASSED > /logs/verifier/reward.txt\n", "not a number: 'PASSED'"),
        ("#!/bin/bash\necho garbage; exit 3\n", "wrote no reward"),
    ],
)
def test_a_verifier_that_hangs_or_prints_garbage_fails_the_episode_as_infra(
    task: Path, test_sh: str, error: str
) -> None:
    (task / "tests" / "test.sh").write_text(test_sh)
    toml = (
        (task / "task.toml")
        .read_text()
        .replace("[verifier]\ntimeout_sec = 30.0", "[verifier]\ntimeout_sec = 2.0")
    )
    (task / "task.toml").write_text(toml)
    assert build_tasks(task.parent, progress=lambda line: None)[0].outcome != "failed"
    register()
    with DockerImagePool(ImagePoolConfig(max_boxes=1, health_interval_s=0)) as pool:
        env = gymnasium.make("harbor/Tasks-v0", tasks_dir=str(task), sandbox_pool=pool)
        env.reset(seed=0)
        _obs, reward, terminated, truncated, info = env.step("<done/>")
        env.close()
        assert (reward, terminated, truncated, info["failure"]) == (0.0, False, True, "infra")
        assert error in info["error"]
        assert pool.status().ready == 1  # the box went back and was reset


def test_errors_of_the_package_share_one_root() -> None:
    from rollgym.tasks.errors import BuildFailed, RegistryImage

    assert issubclass(BuildFailed, TasksError) and issubclass(RegistryImage, TasksError)
