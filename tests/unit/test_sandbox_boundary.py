"""The host's own defences, on the fake box (no isolation there, so the host must hold):
it never follows a link, trusts only the executor's user, reads the Python worker's
replies as data, refuses unusable paths, runs checks, and closes pools at exit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rollgym.sandboxes.agent.identity import Identities, User
from rollgym.sandboxes.agent.wipe import WipedFolder
from rollgym.sandboxes.base import Check, SandboxDied, SandboxFileError, SandboxOOM
from rollgym.sandboxes.box import ExecutorSandbox
from rollgym.sandboxes.config import SandboxConfig
from rollgym.sandboxes.fake import FakeSandbox
from rollgym.sandboxes.replies import BadReply, read_reply

REPLY = {
    "stdout": "out",
    "stderr": "",
    "exit_code": 0,
    "truncated": False,
    "duration_s": 0.1,
    "timed_out": False,
    "oom": True,
}


@pytest.fixture
def box():
    with FakeSandbox(SandboxConfig(python_grace_s=5)) as sandbox:
        yield sandbox


def executor_socket(box: FakeSandbox) -> Path:
    return box.root / "executor.sock"


def test_the_host_never_follows_a_link_to_a_socket(box, tmp_path: Path) -> None:
    link = tmp_path / "executor.sock"
    link.symlink_to(executor_socket(box))  # as a box would, to another box's socket
    other = ExecutorSandbox("linked", str(link), box._config, executor_uid=os.getuid())
    with pytest.raises(SandboxDied, match="not a socket owned by"):
        other.ping()


def test_the_host_talks_only_to_the_executors_user(box) -> None:
    stranger = ExecutorSandbox(
        "stranger", str(executor_socket(box)), box._config, executor_uid=os.getuid() + 1
    )
    with pytest.raises(SandboxDied, match="served by uid"):
        stranger.ping()


@pytest.mark.parametrize("path", ["a\x00b", "\ud800", "dir/\udcff.txt"])
def test_a_path_no_file_system_can_hold_is_a_file_error(box, path: str) -> None:
    with pytest.raises(SandboxFileError):
        box.write_file(path, "x")
    with pytest.raises(SandboxFileError):
        box.read_file(path)
    assert box.run_shell("echo fine").stdout == "fine\n"


def test_only_regular_files_are_read_or_written_and_a_fifo_never_blocks(box) -> None:
    box.run_shell("mkfifo pipe")
    with pytest.raises(SandboxFileError, match="not a regular file"):
        box.read_file("pipe")
    with pytest.raises(SandboxFileError):
        box.write_file("pipe", "x")
    with pytest.raises(SandboxFileError, match="directory"):
        box.read_file("/tmp")


def test_checks_say_which_hold_and_take_data_on_stdin(box) -> None:
    box.write_file("run.sh", "#!/bin/sh\necho ok\n")
    checks = [
        Check("test -f run.sh"),
        Check("test -f missing"),
        Check('test "$(cat)" = ok', stdin="ok\n"),
        Check("sleep 30", timeout=0.3),
    ]
    assert box.verify(checks) == (True, False, True, False)
    assert box.run_shell("cat", stdin="piped").stdout == "piped"


def test_a_worker_reply_is_data_the_oom_flag_only_the_executors() -> None:
    trusted = read_reply(REPLY, cap=100, trusted=True)
    assert trusted.oom and trusted.stdout == "out"
    assert not read_reply(REPLY, cap=100, trusted=False).oom
    cut = read_reply({**REPLY, "stdout": "x" * 500}, cap=100, trusted=False)
    assert cut.stdout == "x" * 100 and cut.truncated


@pytest.mark.parametrize(
    "change",
    [
        {"stdout": 3},
        {"exit_code": True},
        {"exit_code": "0"},
        {"duration_s": float("nan")},
        {"duration_s": -1},
        {"timed_out": "yes"},
        {"truncated": None},
    ],
)
def test_a_malformed_reply_is_refused(change: dict) -> None:
    with pytest.raises(BadReply):
        read_reply({**REPLY, **change}, cap=100, trusted=False)


def test_a_worker_that_answers_nonsense_loses_its_call_not_the_box(box) -> None:
    garbage = textwrap.dedent("""
        import os, socket
        for fd in map(int, os.listdir("/proc/self/fd")):
            try:
                sock = socket.socket(fileno=os.dup(fd))
                if sock.family == socket.AF_UNIX:
                    sock.send(b"\\x00\\x00\\x00\\x0c" + b'{"ok": true}')
            except OSError:
                pass
    """)
    box.run_python(garbage)
    box.run_python("1")
    assert box.run_python("2 + 2").stdout == "4\n"


def test_a_forged_oom_from_the_worker_is_ignored(box) -> None:
    box.run_python(
        "import sys\nresult = sys.modules['agent.result'].CallResult\nreal = result.to_message\n"
        "result.to_message = lambda self: {**real(self), 'oom': True}"
    )
    box.run_python("x = 1")  # no SandboxOOM: only the executor says that
    assert box.oom_kills == 0


def test_an_oom_is_the_agents_and_the_box_lives_on(box) -> None:
    reply = read_reply(REPLY, cap=100, trusted=True)
    with pytest.raises(SandboxOOM):
        box._exec_result({"op": "shell", "timeout": 1}, reply, 0.2)
    assert box.oom_kills == 1 and box.run_shell("echo alive").ok


def test_a_wiped_folder_gets_its_mode_back_and_loses_its_attributes(tmp_path: Path) -> None:
    folder = WipedFolder.capture(str(tmp_path))
    (tmp_path / "deep").mkdir()
    (tmp_path / "deep" / "f").write_text("x")
    (tmp_path / "deep").chmod(0)
    tmp_path.chmod(0o500)
    folder.reset(switching=False)
    assert list(tmp_path.iterdir()) == []
    assert tmp_path.stat().st_mode & 0o777 == folder.mode


def test_users_parse_and_the_fake_switches_none() -> None:
    assert User.parse("61000:61001") == User(61000, 61001)
    assert User.parse("5") == User(5, 5)
    none = Identities.none()
    assert not none.switching and none.agent_process() == {} == none.verifier_process()


EXIT_SCRIPT = """
import os, signal, sys, time
from rollgym.sandboxes import exits

class Pool:
    def close(self):
        print("closed", flush=True)

exits.close_at_exit(Pool())
print("ready", flush=True)
if sys.argv[1] == "term":
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
"""


@pytest.mark.parametrize(("how", "code"), [("end", 0), ("term", 143)])
def test_open_pools_close_when_the_process_ends_or_is_terminated(how: str, code: int) -> None:
    done = subprocess.run(
        [sys.executable, "-c", EXIT_SCRIPT, how], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout) == (code, "ready\nclosed\n")
