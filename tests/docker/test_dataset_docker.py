"""Tasks from a data set in real boxes: the row's tests run as the verifier once the agent
is gone, out of its reach (the unit tier covers the other verifiers on fake boxes)."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium
import pytest

from rollgym.envs.dataset import register
from rollgym.sandboxes.config import ImagePoolConfig
from rollgym.sandboxes.docker import DockerImagePool

TESTS = (
    'test "$(python3 -c \'import add; print(add.add(2, 3))\')" = 5 && grep -qx done "$ANSWER_FILE"'
)
ROW = {
    "id": "fix-add",
    "prompt": "Fix add.py so that add(a, b) returns a + b, then answer <answer>done</answer>.",
    "files": {"add.py": "def add(a, b):\n    return a - b\n"},
    "tests": TESTS,
}


@pytest.fixture
def env(tmp_path: Path):
    data = tmp_path / "code.jsonl"
    data.write_text(json.dumps(ROW) + "\n")
    register()
    with DockerImagePool(ImagePoolConfig(max_boxes=1, health_interval_s=0)) as pool:
        env = gymnasium.make(
            "dataset/Rows-v0", data_files=str(data), verifier={"kind": "tests"}, sandbox_pool=pool
        )
        yield env
        env.close()


def test_the_rows_tests_judge_the_box_as_the_agent_left_it(env) -> None:
    env.reset(options={"task_id": "fix-add"})
    assert env.step("<answer>done</answer>")[1] == 0.0  # the bug is still there
    env.reset(options={"task_id": "fix-add"})
    env.step("```bash\nsed -i 's/a - b/a + b/' add.py\n```")
    assert env.step("<answer>done</answer>")[1:3] == (1.0, True)


def test_the_agent_cannot_plant_or_read_the_tests(env) -> None:
    env.reset(options={"task_id": "fix-add"})
    obs, *_ = env.step("```bash\nls /tests; mkdir -p /tests && echo 'exit 0' > /tests/test.sh\n```")
    assert "Permission denied" in obs[0]["content"]
    assert env.step("<answer>done</answer>")[1] == 0.0
