"""Pure pieces of the in-box executor: REPL semantics, output capture, wiping, OOM counter."""

from __future__ import annotations

import builtins
import contextlib
import io
import os
from pathlib import Path

import pytest

from rollgym.sandboxes.agent import processes
from rollgym.sandboxes.agent.processes import exit_code_of, oom_kill_count
from rollgym.sandboxes.agent.pyworker import execute, take_output
from rollgym.sandboxes.agent.streams import CappedOutput
from rollgym.sandboxes.agent.wipe import wipe


def run(source: str, namespace: dict) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = execute(source, namespace)
    return code, out.getvalue(), err.getvalue()


def test_execute_is_repl_like() -> None:
    ns: dict = {"__builtins__": builtins}
    assert run("a = 2", ns) == (0, "", "")
    assert run("a * 21", ns) == (0, "42\n", "")
    assert run("_ + 1", ns)[1] == "43\n"
    assert run("None", ns)[1] == ""  # like a REPL, None is not shown
    assert run("for i in range(2):\n    print(i)\n'done'", ns)[1] == "0\n1\n'done'\n"


def test_execute_reports_errors_without_its_own_frames() -> None:
    ns: dict = {"__builtins__": builtins}
    code, _, err = run("def f():\n    raise ValueError('bad')\nf()", ns)
    assert code == 1 and "ValueError: bad" in err and 'File "<input>", line 2, in f' in err
    assert "pyworker" not in err
    code, _, err = run("x = (", ns)
    assert code == 1 and "SyntaxError" in err


@pytest.mark.parametrize(
    ("source", "expected"),
    [("raise SystemExit", 0), ("raise SystemExit(3)", 3), ("raise SystemExit('why')", 1)],
)
def test_system_exit_sets_the_code_and_keeps_the_namespace(source: str, expected: int) -> None:
    ns: dict = {"__builtins__": builtins, "kept": 1}
    assert run(source, ns)[0] == expected
    assert ns["kept"] == 1


def test_take_output_reads_up_to_the_cap_and_empties_the_file() -> None:
    fd = os.memfd_create("test")
    try:
        os.write(fd, b"hello world")
        assert take_output(fd, 5) == ("hello", True)
        assert take_output(fd, 5) == ("", False)
        os.write(fd, "é".encode())
        assert take_output(fd, 100) == ("é", False)
    finally:
        os.close(fd)


def test_capped_output_keeps_the_head_and_counts_the_rest() -> None:
    sink = CappedOutput(4)
    for chunk in (b"ab", b"cdef", b"gh"):
        sink.feed(chunk)
    assert (sink.text(), sink.truncated, sink.dropped) == ("abcd", True, 4)
    assert not CappedOutput(4).truncated


def test_wipe_empties_a_folder_even_of_locked_subfolders(tmp_path: Path) -> None:
    (tmp_path / ".hidden").write_text("x")
    locked = tmp_path / "a" / "b"
    locked.mkdir(parents=True)
    (locked / "f").write_text("x")
    (tmp_path / "link").symlink_to("/etc")
    locked.chmod(0)
    (tmp_path / "a").chmod(0o500)
    wipe(str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_exit_codes_follow_the_shell() -> None:
    assert exit_code_of(0) == 0 and exit_code_of(3) == 3
    assert exit_code_of(-9) == 137  # SIGKILL, as the OOM killer leaves it


def test_oom_counter_is_read_from_cgroup_v1_or_v2(tmp_path: Path, monkeypatch) -> None:
    v1 = tmp_path / "oom_control"
    v1.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    monkeypatch.setattr(processes, "OOM_COUNTER_FILES", (tmp_path / "missing", v1))
    assert oom_kill_count() == 3
    v2 = tmp_path / "memory.events"
    v2.write_text("low 0\nhigh 0\nmax 2\noom 2\noom_kill 2\n")
    monkeypatch.setattr(processes, "OOM_COUNTER_FILES", (v2,))
    assert oom_kill_count() == 2
    monkeypatch.setattr(processes, "OOM_COUNTER_FILES", (tmp_path / "missing",))
    assert oom_kill_count() is None
