"""rollgym reads Harbor task directories as Harbor's own parser does.

The ``harbor`` package (0.25.0) needs Python 3.12 and pulls litellm, supabase, fastapi
0.128 and more, so it cannot join rollgym's lock (Python 3.11); rollgym follows its spec
(``rollgym.envs.harbor.task``) and this test holds the two together: it makes a Python 3.12
virtual environment with ``harbor==0.25.0`` and the three packages its task model imports
(once, cached under ~/.cache/rollgym), reads every example task and two edge cases
(a legacy ``memory = "2G"``, a canary line) with ``harbor.models.task.task.Task``, and
compares every field rollgym uses with what ``read_task`` found.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rollgym.envs.harbor.task import read_task

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"
HARBOR = "harbor==0.25.0"
NEEDS = ("pydantic", "toml", "pathspec")  # what harbor.models.task imports
VENV = Path.home() / ".cache" / "rollgym" / "harbor-0.25.0-venv"
READ = """
import json, sys
from harbor.models.task.task import Task
out = {}
for folder in sys.argv[1:]:
    task = Task(folder)
    c = task.config
    out[folder] = {
        "name": task.name,
        "instruction": task.instruction.strip(),
        "agent_timeout_s": c.agent.timeout_sec,
        "verifier_timeout_s": c.verifier.timeout_sec,
        "build_timeout_s": c.environment.build_timeout_sec,
        "cpus": None if c.environment.cpus is None else float(c.environment.cpus),
        "memory_mb": c.environment.memory_mb,
        "max_turns": c.metadata.get("max_turns"),
        "verifier_env": c.verifier.env,
        "has_test": task.paths.discovered_test_path is not None,
        "has_oracle": task.paths.discovered_solve_path is not None,
    }
print(json.dumps(out))
"""


def python312() -> str | None:
    """A Python 3.12 or newer: on PATH, or one of pyenv's."""
    for name in ("python3.13", "python3.12"):
        found = shutil.which(name)
        if found and subprocess.run([found, "--version"], capture_output=True).returncode == 0:
            return found
    pyenv = sorted(glob.glob(str(Path.home() / ".pyenv/versions/3.1[2-9]*/bin/python3")))
    return pyenv[-1] if pyenv else None


@pytest.fixture(scope="module")
def harbor_python() -> str:
    python = VENV / "bin" / "python"
    if not python.exists():
        base = python312()
        if base is None:
            pytest.skip("Harbor 0.25 needs Python 3.12, and none was found")
        subprocess.run([base, "-m", "venv", str(VENV)], check=True)
        pip = [str(VENV / "bin" / "pip"), "install", "-q"]
        for install in ([*pip, "--no-deps", HARBOR], [*pip, *NEEDS]):
            done = subprocess.run(install, capture_output=True, text=True)
            if done.returncode != 0:
                shutil.rmtree(VENV, ignore_errors=True)
                pytest.fail(f"{' '.join(install)} failed: {done.stderr[-2000:]}")
    return str(python)


def harbor_reads(python: str, folders: list[Path]) -> dict[str, dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    done = subprocess.run(
        [python, "-W", "ignore", "-c", READ, *map(str, folders)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def ours(folder: Path) -> dict:
    task = read_task(folder)
    return {
        "name": task.name,
        "instruction": task.instruction,
        "agent_timeout_s": task.agent_timeout_s,
        "verifier_timeout_s": task.verifier_timeout_s,
        "build_timeout_s": task.build_timeout_s,
        "cpus": task.cpus,
        "memory_mb": task.memory_mb,
        "max_turns": task.max_turns,
        "verifier_env": task.verifier_env,
        "has_test": (task.tests_dir / "test.sh").is_file(),
        "has_oracle": task.has_oracle,
    }


def test_every_example_reads_the_same_with_harbors_parser(harbor_python, tmp_path) -> None:
    edge = tmp_path / "edge-case"
    shutil.copytree(EXAMPLES / "count-words", edge)
    (edge / "instruction.md").write_text("# BENCHMARK DATA canary GUID 0d1e\n\nCount them.\n")
    (edge / "task.toml").write_text(
        'version = "1.0"\n[environment]\nmemory = "2G"\ncpus = 2\n[verifier]\nenv = { A = "1" }\n'
    )
    folders = [*sorted(p for p in EXAMPLES.iterdir() if p.is_dir()), edge]
    theirs = harbor_reads(harbor_python, folders)
    assert len(theirs) == 13
    for folder in folders:
        assert ours(folder) == theirs[str(folder)], folder.name
