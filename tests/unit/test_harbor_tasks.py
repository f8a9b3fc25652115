"""Harbor task directories: the format read once with clear errors, image names and
Dockerfiles, the verifier's reward file. Pure: no Docker (the real twins are in
tests/docker/test_harbor_docker.py, and tests/e2e/test_harbor_parser.py reads the
examples with Harbor's own parser)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rollgym.envs.harbor.image import (
    box_dockerfile,
    build_key,
    content_hash,
    from_images,
    image_tag,
    rewrite_from,
)
from rollgym.envs.harbor.reward import VerifierFailed, reward_of
from rollgym.envs.harbor.task import TaskFormatError, read_task, read_tasks

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"


@pytest.fixture
def task_dir(tmp_path: Path) -> Path:
    """A copy of one example task to break."""
    target = tmp_path / "count-words"
    shutil.copytree(EXAMPLES / "count-words", target)
    return target


def test_the_examples_are_twelve_tasks_each_with_an_oracle() -> None:
    tasks = read_tasks(EXAMPLES)
    assert len(tasks) == 12
    assert all(task.has_oracle for task in tasks)
    words = next(t for t in tasks if t.name == "count-words")
    assert words.instruction.startswith("Count the words in /app/text.txt")
    assert (words.agent_timeout_s, words.verifier_timeout_s, words.max_turns) == (120.0, 30.0, 8)
    assert (words.memory_mb, words.cpus) == (512, 1.0)


@pytest.mark.parametrize(
    ("remove", "message"),
    [
        ("instruction.md", "task count-words: instruction.md (the prompt) is missing"),
        ("task.toml", "task count-words: task.toml (its limits) is missing"),
        ("environment/Dockerfile", "environment/Dockerfile (the image's build file) is missing"),
        ("tests/test.sh", "tests/test.sh (the verifier) is missing"),
    ],
)
def test_a_missing_file_is_named(task_dir: Path, remove: str, message: str) -> None:
    (task_dir / remove).unlink()
    with pytest.raises(TaskFormatError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_task(task_dir)


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[agent\ntimeout_sec = 1", "not valid TOML"),
        ("[agent]\ntimeout_sec = -1", "agent.timeout_sec must be a positive number"),
        ("[environment]\nmemory = 'lots'", "use a size like '2G'"),
        ("[metadata]\nmax_turns = 0", "metadata.max_turns must be a positive integer"),
        ("[[steps]]\nname = 'one'", "multi-step tasks"),
        ("[environment]\nos = 'windows'", "only Linux tasks"),
    ],
)
def test_a_bad_task_toml_is_refused_with_its_reason(
    task_dir: Path, toml: str, message: str
) -> None:
    (task_dir / "task.toml").write_text(toml)
    with pytest.raises(TaskFormatError, match=message):
        read_task(task_dir)


def test_a_compose_environment_is_refused_by_name(task_dir: Path) -> None:
    (task_dir / "environment" / "docker-compose.yaml").write_text("services: {}\n")
    with pytest.raises(TaskFormatError, match=r"docker-compose\.yaml: tasks of several services"):
        read_task(task_dir)


def test_canary_lines_are_dropped_and_legacy_memory_is_read(task_dir: Path) -> None:
    (task_dir / "instruction.md").write_text("<!-- BENCHMARK canary GUID 1234 -->\n\nDo it.\n")
    (task_dir / "task.toml").write_text("[environment]\nmemory = '2G'\n")
    task = read_task(task_dir)
    assert task.instruction == "Do it."
    assert task.memory_mb == 2048
    assert task.verifier_timeout_s == 600.0  # Harbor's default


def test_a_folder_without_tasks_says_so(tmp_path: Path) -> None:
    with pytest.raises(TaskFormatError, match="holds no task"):
        read_tasks(tmp_path)


def test_the_image_is_named_by_its_content(task_dir: Path) -> None:
    task = read_task(task_dir)
    tag = image_tag(task)
    assert tag.startswith("rollgym/task-env:") and len(tag.split(":")[1]) == 16
    (task_dir / "tests" / "test.sh").write_text("echo changed\n")
    assert image_tag(read_task(task_dir)) == tag  # tests are not in the image
    (task_dir / "environment" / "files" / "text.txt").write_text("other words\n")
    assert image_tag(read_task(task_dir)) != tag
    sharing = read_tasks(EXAMPLES)
    by_name = {t.name: image_tag(t) for t in sharing}
    assert by_name["sum-column"] == by_name["count-errors"]  # one environment, one image
    assert len(set(by_name.values())) == 11


def test_from_images_names_registry_images_not_stages() -> None:
    dockerfile = "ARG BASE=python:3.11-slim\nFROM ${BASE} AS build\nRUN make\nFROM build\nFROM ubuntu:24.04\n"
    assert from_images(dockerfile) == [(2, "python:3.11-slim"), (5, "ubuntu:24.04")]
    mapped = rewrite_from(dockerfile, {"ubuntu:24.04": "rollgym/base:bookworm"})
    assert mapped.splitlines()[4] == "FROM rollgym/base:bookworm"
    assert from_images("FROM scratch\n") == []


def test_the_box_layer_moves_the_workdir_and_checks_python(task_dir: Path) -> None:
    built = box_dockerfile("FROM rollgym/base:bookworm\nWORKDIR /app\n")
    assert built.startswith("FROM rollgym/base:bookworm\nWORKDIR /app\n")
    assert "ln -s /work" in built and "command -v python3" in built
    assert built.rstrip().endswith("CMD []")
    task = read_task(task_dir)
    key = build_key(built, {"rollgym/base:bookworm": "sha256:1"}, task)
    assert key != build_key(built, {"rollgym/base:bookworm": "sha256:2"}, task)
    assert content_hash(task) == content_hash(read_task(task_dir))


@pytest.mark.parametrize(
    ("files", "reward"),
    [
        ({"reward.txt": b" 0.5\n"}, 0.5),
        ({"reward.json": b"1"}, 1.0),
        ({"reward.json": b'{"score": 0.75}'}, 0.75),
        ({"reward.json": b'{"reward": 0, "other": 1}', "reward.txt": b"1"}, 0.0),
    ],
)
def test_the_reward_is_read_as_harbor_reads_it(files, reward) -> None:
    assert reward_of({"reward.json": None, "reward.txt": None, **files}) == reward


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({}, "wrote no reward"),
        ({"reward.txt": b""}, "is empty"),
        ({"reward.txt": b"PASSED"}, "not a number"),
        ({"reward.txt": b"nan"}, "not a finite number"),
        ({"reward.json": b"{not json"}, "not JSON"),
        ({"reward.json": b'{"a": 1, "b": 0}'}, "which one is the reward"),
        ({"reward.json": b'{"reward": "1"}'}, "not a number"),
        ({"reward.json": b"true"}, "not a number"),
    ],
)
def test_garbage_is_a_verifier_failure_never_a_score(files, message) -> None:
    with pytest.raises(VerifierFailed, match=message):
        reward_of({"reward.json": None, "reward.txt": None, **files})
