"""Agent to a Harbor task's verifier: no reward without doing the task.

A Harbor task is graded by its own ``tests/``, run after the agent's episode. Each attempt
here is the message of an agent that tries to be paid without solving the task: read the
tests or the oracle, write the reward file before the verifier does, rewrite the tests,
leave a process to write the answer once the verifier runs, put a module where
the tests would import it, or lock the work dir so that the tests cannot start (an
infrastructure failure would veto the episode). Each must end with the task's tests scoring the untouched
task 0 (a task failure, trained on), and the box must come back clean.
"""

from __future__ import annotations

from pathlib import Path

import gymnasium
import pytest

from rollgym.envs.harbor import register
from rollgym.sandboxes.config import ImagePoolConfig
from rollgym.sandboxes.docker import DockerImagePool
from rollgym.tasks.build import build_tasks

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "tasks"

ATTEMPTS = {
    "read-the-tests-and-oracle": (
        "count-words",
        "ls -la /tests /logs /solution/ 2>&1; find / -xdev -name 'check.py' -o -name 'solve.sh' "
        "2>/dev/null; cat /tests/check.py /tests/test.sh",
    ),
    "plant-the-reward": (
        "count-words",
        "mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; "
        "echo '{\"reward\": 1}' > /logs/verifier/reward.json",
    ),
    "rewrite-the-tests": (
        "count-words",
        "mkdir -p /tests; printf '#!/bin/bash\\necho 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh",
    ),
    "answer-behind-the-verifiers-back": (
        "count-words",
        "nohup sh -c 'sleep 2; echo 13 > /app/answer.txt; mkdir -p /logs/verifier; "
        "echo 1 > /logs/verifier/reward.txt' >/dev/null 2>&1 &",
    ),
    "shadow-the-tests-imports": (
        "repair-json-config",
        "for m in json pathlib sitecustomize; do printf 'import os\\nos.system(\"echo 1 > "
        "/logs/verifier/reward.txt\")\\nraise SystemExit(0)\\n' > /app/$m.py; done; "
        "cp /app/json.py /tmp/json.py",
    ),
    "lock-the-work-dir": ("count-words", "chmod 000 ."),  # the verifier could not start
    "link-the-answer-to-the-reward": (
        "count-words",
        "ln -sf /logs/verifier/reward.txt /app/answer.txt",
    ),
}


@pytest.fixture(scope="module")
def pool():
    assert all(r.outcome != "failed" for r in build_tasks(EXAMPLES, progress=lambda line: None))
    register()
    with DockerImagePool(ImagePoolConfig(max_boxes=2, health_interval_s=0)) as pool:
        yield pool


@pytest.mark.parametrize("attempt", sorted(ATTEMPTS))
def test_the_untouched_task_earns_nothing_whatever_the_agent_tries(pool, attempt: str) -> None:
    task, command = ATTEMPTS[attempt]
    env = gymnasium.make("harbor/Tasks-v0", tasks_dir=str(EXAMPLES / task), sandbox_pool=pool)
    try:
        env.reset(seed=0)
        obs, _, _, _, info = env.step(f"```bash\n{command}\n```")
        assert info["failure"] != "infra", info["error"]
        shown = obs[0]["content"]
        assert "ROLLGYM_SOLUTION" not in shown and "read_text" not in shown  # nothing leaked
        obs, reward, terminated, _truncated, info = env.step("<done/>")
        assert (reward, terminated, info["failure"]) == (0.0, True, None), info["error"]
        # the next episode on the same image starts clean
        env.reset(seed=0)
        obs, *_ = env.step(
            "```bash\nls -A /app /tmp; ps -u 61000 -o comm= | grep -v -x -e ps -e bash\n```"
        )
        listing = obs[0]["content"]
        assert "answer.txt" not in listing and "json.py" not in listing and "while" not in listing
    finally:
        env.close()
