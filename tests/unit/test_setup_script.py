"""scripts/setup.sh: one set-up at a time, and no daemon it starts keeps the others waiting."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

SETUP = Path(__file__).resolve().parents[2] / "scripts" / "setup.sh"


def _lock_is_free(lock: Path) -> bool:
    return subprocess.run(["flock", "-n", str(lock), "true"], check=False).returncode == 0


def test_a_daemon_started_by_a_set_up_does_not_hold_its_lock(tmp_path: Path) -> None:
    """The set-up that starts dockerd exits while dockerd runs on; a daemon that inherited
    the lock would keep every later set-up (the e2e tier's app-image build) waiting."""
    pid_file = tmp_path / "daemon.pid"
    script = f"""
        source {SETUP}
        one_at_a_time
        start_daemon {tmp_path}/daemon.log bash -c 'echo $$ > {pid_file}; exec sleep 60'
    """
    subprocess.run(
        ["bash", "-c", script], check=True, env={"TMPDIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    )
    deadline = time.monotonic() + 10
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = int(pid_file.read_text())
    try:
        assert Path(f"/proc/{pid}").exists(), "the daemon should outlive the set-up"
        assert _lock_is_free(next(tmp_path.glob("rollgym-setup-*.lock")))
    finally:
        subprocess.run(["kill", str(pid)], check=False)


def test_a_second_set_up_says_it_waits_then_goes_on_when_the_first_ends(tmp_path: Path) -> None:
    env = {"TMPDIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    first = subprocess.Popen(
        ["bash", "-c", f"source {SETUP}; one_at_a_time; echo held; exec sleep 60"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    second_log = tmp_path / "second.log"
    with second_log.open("w") as log:
        assert first.stdout is not None and first.stdout.readline() == "held\n"
        second = subprocess.Popen(
            ["bash", "-c", f"source {SETUP}; one_at_a_time"], env=env, stderr=log
        )
    try:
        time.sleep(1)
        assert second.poll() is None, "the second set-up should wait while the first holds the lock"
        lock = next(tmp_path.glob("rollgym-setup-*.lock"))
        assert f"waiting for the set-up that holds {lock}" in second_log.read_text()
        first.kill()
        assert second.wait(timeout=10) == 0
    finally:
        first.kill()
        second.kill()
        first.wait()
