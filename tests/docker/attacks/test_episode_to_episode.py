"""Episode to episode: reset leaves nothing an agent wrote, started or set."""

from __future__ import annotations

import textwrap

import gymnasium
import pytest
from attack_kit import assert_still_fine

from rollgym.envs.scripted import fenced

WRITABLE = {"/work", "/tmp", "/dev/shm", "/dev/mqueue"}  # what reset wipes
# Devices anyone may write to, which store nothing.
DEVICES = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"}

FIND_WRITABLE = (
    "find / \\( -path /proc -o -path /sys \\) -prune -o -writable ! -type l -print 2>/dev/null"
)

LEAVE_EVERYTHING = textwrap.dedent("""
    set +e
    for d in /work /tmp /dev/shm; do
        echo cached > $d/.answer-cache; mkdir -p $d/deep/er; echo x > $d/deep/er/f
        ln -s /etc/passwd $d/link; mkfifo $d/fifo; chmod 000 $d/deep
    done
    python3 -c "import socket; socket.socket(socket.AF_UNIX).bind('/tmp/sock')"
    python3 -c "import ctypes, os; lib = ctypes.CDLL(None); lib.mq_open(b'/cache', os.O_CREAT | os.O_RDWR, 0o600, None)"
    ipcmk -M 4096 >/dev/null; ipcmk -S 1 >/dev/null; ipcmk -Q >/dev/null
    setfattr -n user.cache -v 42 /work 2>/dev/null || python3 -c "import os; os.setxattr('/work', 'user.cache', b'42')"
    setsid sleep 1000 >/dev/null 2>&1 < /dev/null &
    nohup sleep 999 >/dev/null 2>&1 &
    (trap '' TERM HUP INT; exec -a innocent sleep 998) >/dev/null 2>&1 &
    sh -c 'sh -c "sleep 997 &" &' >/dev/null 2>&1
    chmod 000 /work
    true
""")

LOOK = textwrap.dedent("""
    ls -A /work /tmp /dev/shm /dev/mqueue
    ipcs | grep -c '^0x' || true
    stat -c %a /work
    python3 -c "import os; print(os.listxattr('/work'))"
    ps -eo user=,args= | grep -v -e '^root' -e 'ps -eo' -e 'bash -c' -e agent.executor -e agent.relay -e grep || true
""")

CLEAN = "/dev/mqueue:\n\n/dev/shm:\n\n/tmp:\n\n/work:\n0\n755\n[]\n"


def test_the_agent_can_write_only_where_reset_wipes(pool) -> None:
    with pool.sandbox() as box:
        found = set(box.run_shell(FIND_WRITABLE).stdout.split())
        places = {path for path in found if not any(path.startswith(w + "/") for w in WRITABLE)}
        assert places <= WRITABLE | DEVICES | {"/dev/ptmx", "/dev/pts/ptmx"}, places - WRITABLE
    assert_still_fine(pool)


def test_reset_leaves_no_files_processes_ipc_or_attributes(pool) -> None:
    with pool.sandbox() as box:
        box_id = box.id
        box.run_shell(LEAVE_EVERYTHING)
        box.run_python("cache = 'in memory'")
    # the same box, reset: the other of the two boxes is taken first so we get this one
    other = pool.acquire()
    with pool.sandbox() as box:
        assert box.id == box_id
        assert box.run_shell(LOOK).stdout == CLEAN
        assert "NameError" in box.run_python("cache").stderr
    pool.release(other)
    assert_still_fine(pool)


@pytest.mark.parametrize("cache", ["~/.answers", "/tmp/.answers", "/dev/shm/.answers"])
def test_a_shell_episode_cannot_read_what_an_earlier_one_cached(pool, cache: str) -> None:
    env = gymnasium.make("rollgym/Shell-v0", sandbox_pool=pool)
    seen = set()
    for _ in range(pool.config.size + 1):  # at least one box serves two episodes
        env.reset(options={"task_id": "make-dir"})
        seen.add(env.unwrapped._box.id)
        obs, *_ = env.step(fenced("bash", f"cat {cache} 2>/dev/null || echo none"))
        assert "none" in obs[0]["content"] and "secret answer" not in obs[0]["content"]
        env.step(fenced("bash", f"echo 'secret answer' > {cache}"))
    assert len(seen) <= pool.config.size
    env.close()
    assert_still_fine(pool)
