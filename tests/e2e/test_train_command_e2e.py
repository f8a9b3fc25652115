"""``rollgym train`` against a real server that holds groups and runs no job (issue 39, part
5): the real twin of tests/unit/test_train_command.py's fake-server runs, and of
tests/unit/test_tcmalloc.py's fake restart (the trainer's process runs on tcmalloc).

The groups are played at version 0 by a rollout job that is then stopped, as external
agents' groups would wait in the buffer. The server serves the model ``--model`` names,
never updated, so nothing is pushed first and every held group is trained, none stale.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rollgym.contract.wire import RolloutJob, SamplingSettings
from rollgym.run.server_process import ServerProcess
from rollgym.trainer.client import ServerClient

GROUPS = 2


@pytest.fixture(scope="module")
def server(tmp_path_factory, default_model_dir) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("train-command-e2e")
    with ServerProcess(
        model_dir=default_model_dir,
        data_dir=root / "server",
        threads=1,
        settings={"ROLLGYM_ENGINE__MAX_MODEL_LEN": "1024"},
    ) as process:
        yield process


def _hold_groups(client: ServerClient, count: int) -> None:
    """``count`` complete groups in the buffer at version 0, and no job running."""
    client.start_rollouts(
        RolloutJob(
            env_id="rollgym/GuessNumber-v0",
            env_kwargs={"low": 1, "high": 8},
            group_size=4,
            groups_per_batch=count,
            max_staleness=0,
            max_turns=2,
            sampling=SamplingSettings(max_tokens=4),
            drop_zero_variance=False,
        )
    )
    deadline = time.monotonic() + 300
    while client.rollouts().buffered_groups < count:
        assert time.monotonic() < deadline, "the job did not fill the buffer"
        time.sleep(0.5)
    client.stop_rollouts()


def _run_watching_allocator(
    command: list[str], scratch: Path
) -> tuple[subprocess.CompletedProcess[str], bool]:
    """Run ``command``; whether its process ever had tcmalloc mapped (read while it ran)."""
    out, err = scratch / "stdout", scratch / "stderr"
    with out.open("w") as stdout, err.open("w") as stderr:
        process = subprocess.Popen(command, stdout=stdout, stderr=stderr, text=True)
        maps, seen, deadline = Path(f"/proc/{process.pid}/maps"), False, time.monotonic() + 600
        while process.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(OSError):  # it may end between poll() and the read
                seen = seen or "libtcmalloc" in maps.read_text()
            time.sleep(0.2)
        process.kill()  # where the deadline passed; a no-op once it ended
        returncode = process.wait()
    done = subprocess.CompletedProcess(command, returncode, out.read_text(), err.read_text())
    return done, seen


def test_held_groups_are_all_trained_without_a_first_push(
    server, default_model_dir, tmp_path
) -> None:
    config = server.client_config()
    with ServerClient(config) as client:
        _hold_groups(client, GROUPS)
        assert client.policy_version() == 0
    command = [
        sys.executable, "-m", "rollgym.cli", "train", "--server", config.url,
        "--model", str(default_model_dir), "--output-dir", str(tmp_path / "run"),
        f"--token={server.admin_token}", "--total-steps", str(GROUPS), "--group-size", "4",
        "--groups-per-batch", "1", "--max-staleness", "1", "--wait-s", "60",
    ]  # fmt: skip
    done, on_tcmalloc = _run_watching_allocator(command, tmp_path)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert on_tcmalloc  # the trainer restarted itself on it (rollgym.run.tcmalloc)
    assert "nothing is pushed first" in done.stdout
    assert f"trained {GROUPS} steps" in done.stdout
    with ServerClient(config) as client:
        assert client.policy_version() == GROUPS  # one push per step, none before the first
        assert client.rollouts().buffered_groups == 0  # every held group trained, none stale

    again = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert again.returncode == 1  # the output dir's run is over: refused, not a silent 0
    assert "already trained to step 2" in again.stderr
