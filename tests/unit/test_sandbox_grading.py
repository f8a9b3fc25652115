"""Grading (``Sandbox.grade``): a task's tests as the verifier, once the agent is gone; and
a task's starting files (``agent.seed``). On the fake box (no users); the real twin with
users and modes: tests/docker/test_harbor_docker.py and tests/docker/attacks/."""

from __future__ import annotations

import os
import stat
import time

import pytest

from rollgym.sandboxes.agent.seed import plant
from rollgym.sandboxes.base import Grading, SandboxError
from rollgym.sandboxes.config import SandboxConfig
from rollgym.sandboxes.fake import FakeSandbox

pytestmark = pytest.mark.unit

CONFIG = SandboxConfig(verifier_dirs=("/tests", "/logs"))


def test_the_tests_run_with_their_files_and_the_results_come_back() -> None:
    with FakeSandbox(CONFIG) as box:
        box.run_shell("echo 13 > answer.txt")
        graded = box.grade(
            Grading(
                command='test "$(cat answer.txt)" = "$(cat "$T")" && echo 1 > "$R"; echo done',
                files={"/tests/expected": b"13\n"},
                read=("/logs/reward.txt", "/logs/absent"),
                environment={"T": str(box.verifier_dirs["/tests"] / "expected"),
                             "R": str(box.verifier_dirs["/logs"] / "reward.txt")},
                timeout=10,
            )
        )  # fmt: skip
    assert graded.exit_code == 0 and not graded.timed_out
    assert graded.output == "done\n"
    assert graded.files == {"/logs/reward.txt": b"1\n", "/logs/absent": None}


def test_every_agent_process_is_gone_before_the_tests_run() -> None:
    with FakeSandbox(CONFIG) as box:
        box.run_shell("echo 1 > answer.txt; (sleep 0.5; echo 0 > answer.txt) &")
        graded = box.grade(Grading(command="sleep 1; cat answer.txt", timeout=10))
    assert graded.output == "1\n"  # the late writer was killed with the agent


def test_each_grading_starts_from_empty_verifier_folders() -> None:
    with FakeSandbox(CONFIG) as box:
        logs = box.verifier_dirs["/logs"]
        box.grade(Grading(command=f"echo stale > {logs}/reward.txt", timeout=10))
        graded = box.grade(Grading(command="true", read=("/logs/reward.txt",), timeout=10))
        assert graded.files == {"/logs/reward.txt": None}
        box.grade(Grading(command=f"echo x > {logs}/left", timeout=10))
        box.reset()
        assert os.listdir(logs) == []  # reset empties them too


def test_a_grading_past_its_time_is_killed_and_says_so() -> None:
    with FakeSandbox(CONFIG) as box:
        start = time.monotonic()
        graded = box.grade(Grading(command="sleep 30", timeout=0.5))
    assert graded.timed_out and time.monotonic() - start < 5


def test_files_outside_the_verifier_folders_are_refused() -> None:
    with FakeSandbox(CONFIG) as box, pytest.raises(SandboxError, match="not inside a verifier"):
        box.grade(Grading(command="true", files={"/work/../tests/../work/x": b"x"}))


def test_verifier_folders_must_be_top_level_and_not_the_systems() -> None:
    for bad in (("/etc",), ("tests",), ("/a/b",), ("/work",), ("/x", "/x")):
        with pytest.raises(ValueError):
            SandboxConfig(verifier_dirs=bad)


def test_plant_copies_a_seed_with_modes_links_and_no_setuid(tmp_path) -> None:
    seed, work = tmp_path / "seed", tmp_path / "work"
    (seed / "src").mkdir(parents=True)
    (seed / "src" / "run.sh").write_text("echo hi\n")
    (seed / "src" / "run.sh").chmod(0o4755)
    (seed / "data.txt").write_text("data\n")
    (seed / "link").symlink_to("/etc/passwd")
    work.mkdir()
    plant(str(seed), str(work), None)
    assert (work / "data.txt").read_text() == "data\n"
    assert stat.S_IMODE((work / "src" / "run.sh").stat().st_mode) == 0o755
    assert os.readlink(work / "link") == "/etc/passwd"  # a link, never followed
