"""A Harbor task directory, read and checked once: what the env, the build and the check need.

The format (Harbor's, which Terminal-Bench, TRL, SkyRL, verifiers, rLLM, NeMo-Gym and
OpenEnv read)::

    my-task/
    ├── instruction.md     the prompt (leading canary comment lines are dropped)
    ├── task.toml          limits: [agent] timeout_sec, [verifier] timeout_sec,
    │                      [environment] build_timeout_sec, cpus, memory_mb (or memory
    │                      = "2G"), workdir, ...; [metadata] is free (rollgym reads
    │                      max_turns there)
    ├── environment/       the image's build context: a Dockerfile and its files
    ├── tests/             test.sh (+ helpers): the verifier; it writes the reward to
    │                      /logs/verifier/reward.txt (a number) or reward.json
    └── solution/          solve.sh (+ files): the oracle

``read_task`` parses one directory, ``read_tasks`` a directory of them (or one task
directory itself); anything missing or malformed is a ``TaskFormatError`` that names the
task and the file. What rollgym does not run is refused by name rather than half-run: a
compose file instead of a Dockerfile, multi-step tasks, Windows tasks. The fields follow
Harbor 0.25's ``TaskConfig`` (``harbor.models.task.config``), which needs Python 3.12:
``tests/e2e/test_harbor_parser.py`` reads the example tasks with Harbor's own parser and
compares.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rollgym.envs.errors import EnvLoadError

CANARY_LINE = re.compile(r"^(<!--.*canary.*-->|#.*canary.*)$", re.IGNORECASE)
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
DEFAULT_VERIFIER_TIMEOUT_S = 600.0
DEFAULT_BUILD_TIMEOUT_S = 600.0


class TaskFormatError(EnvLoadError):
    """A task directory that is not a Harbor task rollgym can run; the message names it."""


@dataclasses.dataclass(frozen=True)
class HarborTask:
    """One task directory, validated. Times in seconds, memory in MiB (None: not set)."""

    name: str
    path: Path
    instruction: str
    agent_timeout_s: float | None
    verifier_timeout_s: float
    build_timeout_s: float
    cpus: float | None
    memory_mb: int | None
    max_turns: int | None
    verifier_env: dict[str, str]

    @property
    def environment_dir(self) -> Path:
        return self.path / "environment"

    @property
    def dockerfile(self) -> Path:
        return self.environment_dir / "Dockerfile"

    @property
    def tests_dir(self) -> Path:
        return self.path / "tests"

    @property
    def solution_dir(self) -> Path:
        return self.path / "solution"

    @property
    def has_oracle(self) -> bool:
        return (self.solution_dir / "solve.sh").is_file()


def read_tasks(folder: str | Path) -> tuple[HarborTask, ...]:
    """Every task in ``folder`` (its subfolders holding a ``task.toml``), by name; or
    ``folder`` itself when it is one task."""
    root = Path(folder)
    if not root.is_dir():
        raise TaskFormatError(f"{root} is not a folder of Harbor tasks")
    if (root / "task.toml").is_file():
        return (read_task(root),)
    tasks = tuple(read_task(d) for d in sorted(root.iterdir()) if (d / "task.toml").is_file())
    if not tasks:
        raise TaskFormatError(f"{root} holds no task: no subfolder has a task.toml")
    names = [task.name for task in tasks]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise TaskFormatError(f"{root}: task names {twice} are used twice")
    return tasks


def read_task(folder: str | Path) -> HarborTask:
    """One task directory; ``TaskFormatError`` names the task and what is wrong."""
    path = Path(folder).resolve()
    name = path.name
    if not NAME.match(name):
        raise TaskFormatError(f"task folder name {name!r}: use letters, digits, '.', '_', '-'")
    config = _config(path, name)
    _refuse_unsupported(config, path, name)
    _require(path / "instruction.md", name, "the prompt")
    _require(path / "environment" / "Dockerfile", name, "the image's build file")
    _require(path / "tests" / "test.sh", name, "the verifier")
    instruction = _strip_canary((path / "instruction.md").read_text(encoding="utf-8")).strip()
    if not instruction:
        raise TaskFormatError(f"task {name}: instruction.md is empty")
    agent, verifier = _table(config, "agent", name), _table(config, "verifier", name)
    environment, metadata = _table(config, "environment", name), _table(config, "metadata", name)
    try:
        return HarborTask(
            name=name,
            path=path,
            instruction=instruction,
            agent_timeout_s=_seconds(agent.get("timeout_sec"), "agent.timeout_sec"),
            verifier_timeout_s=_seconds(
                verifier.get("timeout_sec", DEFAULT_VERIFIER_TIMEOUT_S), "verifier.timeout_sec"
            )
            or DEFAULT_VERIFIER_TIMEOUT_S,
            build_timeout_s=_seconds(
                environment.get("build_timeout_sec", DEFAULT_BUILD_TIMEOUT_S),
                "environment.build_timeout_sec",
            )
            or DEFAULT_BUILD_TIMEOUT_S,
            cpus=_seconds(environment.get("cpus"), "environment.cpus"),
            memory_mb=_memory_mb(environment),
            max_turns=_positive_int(metadata.get("max_turns"), "metadata.max_turns"),
            verifier_env={str(k): str(v) for k, v in _table(verifier, "env", name).items()},
        )
    except ValueError as exc:
        raise TaskFormatError(f"task {name}: task.toml: {exc}") from exc


def task_files(folder: Path) -> Iterator[tuple[str, Path]]:
    """``(relative posix path, file)`` of every regular file under ``folder``, sorted;
    links and other special files are refused (a task ships plain files)."""
    for path in sorted(folder.rglob("*")):
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise TaskFormatError(f"{path}: a task's files must be plain files and folders")
        if path.is_file():
            yield path.relative_to(folder).as_posix(), path


def _config(path: Path, name: str) -> dict[str, Any]:
    toml = path / "task.toml"
    _require(toml, name, "its limits")
    try:
        return tomllib.loads(toml.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise TaskFormatError(f"task {name}: task.toml is not valid TOML: {exc}") from exc


def _refuse_unsupported(config: dict[str, Any], path: Path, name: str) -> None:
    environment = config.get("environment", {})
    compose = [f for f in ("docker-compose.yaml", "docker-compose.yml", "compose.yaml")
               if (path / "environment" / f).exists()]  # fmt: skip
    if compose:
        raise TaskFormatError(
            f"task {name}: environment/{compose[0]}: tasks of several services are not "
            "supported; give the task one Dockerfile"
        )
    if config.get("steps"):
        raise TaskFormatError(f"task {name}: multi-step tasks ([[steps]]) are not supported")
    if isinstance(environment, dict) and str(environment.get("os", "linux")).lower() != "linux":
        raise TaskFormatError(f"task {name}: only Linux tasks run here (os = linux)")
    if isinstance(environment, dict) and environment.get("mcp_servers"):
        raise TaskFormatError(
            f"task {name}: MCP servers ([environment] mcp_servers) are not supported"
        )


def _require(file: Path, name: str, what: str) -> None:
    if not file.is_file():
        relative = file.relative_to(file.parents[1]) if file.parent.name != name else file.name
        raise TaskFormatError(f"task {name}: {relative} ({what}) is missing")


def _table(config: dict[str, Any], key: str, name: str) -> dict[str, Any]:
    value = config.get(key, {})
    if not isinstance(value, dict):
        raise TaskFormatError(f"task {name}: task.toml: [{key}] must be a table")
    return value


def _strip_canary(text: str) -> str:
    """Harbor's ``strip_canary``: leading canary comment lines and the blank lines after."""
    lines = text.split("\n")
    at = 0
    while at < len(lines) and CANARY_LINE.match(lines[at].strip()):
        at += 1
    while at < len(lines) and not lines[at].strip():
        at += 1
    return "\n".join(lines[at:])


def _seconds(value: object, field: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError(f"{field} must be a positive number, got {value!r}")
    return float(value)


def _positive_int(value: object, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{field} must be a positive integer, got {value!r}")
    return value


def _memory_mb(environment: dict[str, Any]) -> int | None:
    """``memory_mb``, or the legacy ``memory = "2G"`` ("512M", "1024K"), as Harbor reads it."""
    if "memory_mb" in environment:
        return _positive_int(environment["memory_mb"], "environment.memory_mb")
    memory = environment.get("memory")
    if memory is None:
        return None
    text = str(memory).strip().upper()
    units = {"G": 1024.0, "M": 1.0, "K": 1 / 1024}
    if not text or text[-1] not in units:
        raise ValueError(f"environment.memory {memory!r}: use a size like '2G' or '512M'")
    try:
        return int(float(text[:-1]) * units[text[-1]])
    except ValueError as exc:
        raise ValueError(f"environment.memory {memory!r}: use a size like '2G' or '512M'") from exc
