"""A server whose parent is killed with -9 stops itself and removes its boxes.

``ServerProcess`` (what ``rollgym run``, the benchmarks and these tests start servers with)
hands the server one end of a pipe (``rollgym serve --parent-pipe``); when the parent dies,
however it dies, the kernel closes the other end and the server stops as on SIGTERM. Before
this, a ``rollgym run`` killed with -9 left its server and every warm box running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

POOL = 2
PARENT = """
import sys, time
from pathlib import Path
from rollgym.run.server_process import ServerProcess

server = ServerProcess(
    model_dir=Path(sys.argv[1]),
    data_dir=Path(sys.argv[2]),
    threads=1,
    settings={"ROLLGYM_SANDBOXES__POOL_SIZE": sys.argv[3]},
)
server.start()
print(server.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _group(leader: int) -> list[int]:
    """The live processes of ``leader``'s process group (the server and its engine)."""
    members = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == leader and _alive(process.pid):
                members.append(process.pid)
        except ProcessLookupError:
            continue
    return members


def _wait_until(condition, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout_s:.0f} s")
        time.sleep(0.25)


def test_a_server_whose_parent_is_killed_stops_and_removes_its_boxes(
    tmp_path, default_model_dir, docker_client
) -> None:
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            PARENT,
            str(default_model_dir),
            str(tmp_path / "server"),
            str(POOL),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    server_pid = 0

    def boxes() -> list[object]:
        """The server's boxes: the owner label holds the pid of the process that made them."""
        listed = docker_client.containers.list(all=True, filters={"label": "rollgym.sandbox"})
        return [
            c for c in listed if c.labels.get("rollgym.owner", "0").split()[0] == str(server_pid)
        ]

    try:
        assert parent.stdout is not None
        server_pid = int(parent.stdout.readline())  # printed once /health answered
        _wait_until(lambda: len(boxes()) == POOL, 120, f"the pool did not warm {POOL} boxes")

        parent.kill()  # -9: no handler runs, nothing is stopped by the parent
        parent.wait()
        _wait_until(
            lambda: not _group(server_pid), 60, "the orphaned server or its engine did not stop"
        )
        assert boxes() == [], "the server stopped and left its boxes behind"
    finally:
        parent.kill()
        if server_pid and _group(server_pid):
            os.killpg(server_pid, signal.SIGKILL)  # it leads its group: its engine too
        for box in boxes():
            box.remove(force=True)  # type: ignore[attr-defined]
