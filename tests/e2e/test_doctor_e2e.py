"""``rollgym doctor`` as a user runs it, the real twin of tests/unit/test_doctor.py: the
default model and a built-in env with tools and a sandbox (ToolUse), every check run for
real (vLLM samples on the probe prompts and transformers scores them, a Docker pool starts
and its box answers, the env plays in it), each one passes, exit status 0."""

from __future__ import annotations

import subprocess
import sys

ENV_ID = "rollgym/ToolUse-v0"


def test_the_default_model_and_a_built_in_env_pass_every_check(
    default_model_dir, docker_client
) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "rollgym.cli", "doctor", str(default_model_dir), ENV_ID],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    lines = run.stdout.splitlines()  # vLLM logs to stdout too: the table is the end
    lines = lines[lines.index(f"rollgym doctor {default_model_dir} {ENV_ID}") :]
    assert lines[-1] == "every check passes"
    rows = lines[2:-1]
    assert len(rows) == 6 and all(row[38:44].strip() == "pass" for row in rows), run.stdout
    print("\n".join(lines))
