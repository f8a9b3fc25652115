"""A user's environment from outside the rollgym packages, end to end: the example package
is pip-installed into a fresh folder, then a separate Python process finds it through its
``rollgym.envs`` entry point (and through a ``"module:id"`` id), serves it with
``envs.make`` and runs episodes concurrently under asyncio, as the rollout server does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "rollgym-example-env"

DRIVER = r"""
import asyncio, json
from rollgym import envs
from rollgym.envs.aio import areset, astep

async def episode(env_id, seed, right):
    env = envs.make(env_id)
    opening, info = await areset(env, seed=seed)
    word = info["task_id"]
    steps = []
    while True:
        action = word[::-1] if right else "no idea"
        obs, reward, terminated, truncated, info = await astep(env, action)
        steps.append({"obs": list(obs), "reward": reward, "terminated": terminated,
                      "truncated": truncated, "failure": info["failure"]})
        if terminated or truncated:
            env.close()
            return {"opening": list(opening), "steps": steps}

async def main():
    runs = [episode("example/Reverse-v0", s, right=s % 2 == 0) for s in range(6)]
    runs.append(episode("rollgym_example_env:example/Reverse-v0", 9, right=True))
    results = await asyncio.gather(*runs)
    print(json.dumps({"loaded": envs.load_user_envs(), "results": results}))

asyncio.run(main())
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("user_site")
    source = tmp_path_factory.mktemp("user_src") / EXAMPLE.name
    shutil.copytree(EXAMPLE, source)  # building writes build/ and *.egg-info next to the source
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(source)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return target


def test_an_installed_user_env_is_served_without_changes_to_rollgym(
    installed: Path, tmp_path
) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(installed), str(ROOT)])}
    run = subprocess.run(
        [sys.executable, "-W", "error::UserWarning", "-c", DRIVER],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["loaded"]["example"] is None  # (rollgym's own entry points load too)
    for seed, result in enumerate(report["results"][:6]):
        assert result["opening"][0]["role"] == "user"
        assert result["opening"][0]["content"].startswith("Spell this word backwards:")
        steps = result["steps"]
        assert all(step["failure"] is None for step in steps)
        if seed % 2 == 0:  # the right answer: one step, reward 1, terminated
            assert [(s["reward"], s["terminated"]) for s in steps] == [(1.0, True)]
            assert steps[0]["obs"] == [{"role": "user", "content": "Correct."}]
        else:  # a wrong answer until the user's turn limit truncates
            assert [(s["reward"], s["terminated"], s["truncated"]) for s in steps] == [
                (0.0, False, False),
                (0.0, False, False),
                (0.0, False, True),
            ]
    assert report["results"][6]["steps"][-1]["reward"] == 1.0


def test_the_user_package_does_not_import_rollgym() -> None:
    source = (EXAMPLE / "rollgym_example_env" / "__init__.py").read_text()
    assert "import envs" not in source and "from envs" not in source
