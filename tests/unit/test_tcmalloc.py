"""The training commands' processes start again on tcmalloc (rollgym.run.tcmalloc).

The restart checks run in fresh interpreters: which allocator the loader mapped, and what
a child inherits, are the things tested. ``scripts/setup.sh`` installs the library; a
machine without it fails here, not silently on glibc.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rollgym import cli
from rollgym.run import tcmalloc
from rollgym.run.tcmalloc import RESTARTED, restart_environment

LIBRARY = "libtcmalloc_minimal.so.4"

# Prints its pid, restarts, then says what it runs on and what a child of it runs on.
SCRIPT = """
import os, subprocess, sys
print("started", os.getpid(), flush=True)
from rollgym.run.tcmalloc import on_tcmalloc, restart_on_tcmalloc
restart_on_tcmalloc()
child = "from rollgym.run.tcmalloc import on_tcmalloc; print(on_tcmalloc())"
in_child = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True)
print("on", on_tcmalloc(), repr(os.environ.get("LD_PRELOAD")), in_child.stdout.strip())
"""


def _run_script(**env: str) -> list[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", RESTARTED)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.splitlines()


def test_the_machine_has_tcmalloc():
    assert tcmalloc.library_name() == LIBRARY, "run scripts/setup.sh (libtcmalloc-minimal4)"


def test_the_restart_preloads_tcmalloc_before_what_was_preloaded_and_remembers_it():
    environ = restart_environment({"LD_PRELOAD": "libm.so.6", "HOME": "/h"}, LIBRARY)
    assert environ is not None
    assert environ["LD_PRELOAD"] == f"{LIBRARY}:libm.so.6"
    assert environ[RESTARTED] == "libm.so.6"
    assert environ["HOME"] == "/h"
    assert int(environ["TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD"]) >= 1 << 40
    assert restart_environment({}, LIBRARY)[RESTARTED] == ""  # type: ignore[index]


@pytest.mark.parametrize(
    "environ, library",
    [
        ({}, None),  # the machine has no tcmalloc
        ({"ROLLGYM_MALLOC": "system"}, LIBRARY),  # the user keeps glibc's
        ({RESTARTED: ""}, LIBRARY),  # restarted once already (ld.so may have refused it)
    ],
)
def test_no_restart_where_it_cannot_or_should_not(environ, library):
    assert restart_environment(environ, library) is None


def test_a_process_restarts_once_as_itself_and_its_children_start_on_glibc():
    started_a, started_b, outcome = _run_script()
    assert started_a == started_b  # the same process id, started twice
    assert outcome == "on True None False"  # on tcmalloc; LD_PRELOAD gone again; child not


def test_a_preload_the_user_set_reaches_the_children_unchanged():
    *_, outcome = _run_script(LD_PRELOAD="libm.so.6")
    assert outcome == "on True 'libm.so.6' False"


def test_rollgym_malloc_system_keeps_glibcs_malloc_and_starts_once():
    lines = _run_script(ROLLGYM_MALLOC="system")
    assert len(lines) == 2
    assert lines[1] == "on False None False"


class Restarted(Exception):
    """Stands for the exec, which would replace the test's own process."""


def _fake_restart() -> None:
    raise Restarted


@pytest.mark.parametrize(
    "command",
    [
        ["run", "--steps", "1"],
        ["train", "--server", "http://x", "--model", "m", "--output-dir", "o"],
    ],
)
def test_the_cli_restarts_its_training_commands_from_a_command_line(monkeypatch, command):
    monkeypatch.setattr(tcmalloc, "restart_on_tcmalloc", _fake_restart)
    monkeypatch.setattr(sys, "argv", ["rollgym", *command])
    with pytest.raises(Restarted):
        cli.main()


def test_the_cli_never_restarts_a_caller_or_other_commands(monkeypatch):
    monkeypatch.setattr(tcmalloc, "restart_on_tcmalloc", _fake_restart)
    calls: list[str] = []
    monkeypatch.setattr(cli, "_serve", lambda args: calls.append("serve") or 0)
    monkeypatch.setattr(sys, "argv", ["rollgym", "serve"])
    assert cli.main() == 0  # not a training command
    assert calls == ["serve"]
    parsed = cli._build_parser().parse_args(["run"])
    monkeypatch.setattr(parsed, "handler", lambda args: 7)
    monkeypatch.setattr(cli, "_build_parser", lambda: _Parser(parsed))
    assert cli.main(["run"]) == 7  # argv given: a caller's process, never replaced


class _Parser:
    def __init__(self, parsed: object) -> None:
        self.parsed = parsed

    def parse_args(self, argv: object) -> object:
        return self.parsed
