"""Agent to executor: agent code cannot trace, read, signal or impersonate the trusted side."""

from __future__ import annotations

import textwrap

import pytest
from attack_kit import assert_still_fine

from rollgym.sandboxes.base import SandboxFileError, SandboxOOM, SandboxTimeout

FIND_EXECUTOR = "pid=$(pgrep -u root -x python3)"  # the keeper is sh, the init docker-init

TRACE = textwrap.dedent("""
    import ctypes, os, subprocess
    libc = ctypes.CDLL(None, use_errno=True)
    pids = subprocess.run(["pgrep", "-u", "root"], capture_output=True, text=True).stdout.split()
    PTRACE_ATTACH, PTRACE_SEIZE = 16, 0x4206
    results = []
    for pid in map(int, pids):
        for request in (PTRACE_ATTACH, PTRACE_SEIZE):
            results.append(libc.ptrace(request, pid, None, None) == 0)
        for name in ("mem", "environ", "maps", "fd/0", "stack", "syscall"):
            try:
                open(f"/proc/{pid}/{name}", "rb").read(1)
                results.append(True)
            except OSError:
                results.append(False)
        local = (ctypes.c_char * 8)()
        iov = (ctypes.c_void_p * 2)(ctypes.addressof(local), 8)
        results.append(libc.process_vm_readv(pid, iov, 1, iov, 1, 0) > 0)
    print(len(pids), any(results))
""")


def test_the_executor_cannot_be_traced_or_read(pool) -> None:
    with pool.sandbox() as box:
        out = box.run_python(TRACE).stdout.split()
        assert int(out[0]) >= 3 and out[1] == "False"  # init, keeper, executor: all refused
    assert_still_fine(pool)


@pytest.mark.parametrize(
    "attempt",
    [
        f"{FIND_EXECUTOR}; kill -9 $pid",
        f"{FIND_EXECUTOR}; kill -STOP $pid",
        "kill -TERM 1; kill -KILL 1",
        "kill -9 -1",
        "pkill -9 -f agent.executor",
        f"{FIND_EXECUTOR}; cat /proc/$pid/cmdline > /dev/null; echo 1000 > /proc/$pid/oom_score_adj",
        "python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('/run/rollgym/executor.sock')\"",
    ],
)
def test_the_executor_cannot_be_signalled_or_reached(pool, attempt: str) -> None:
    with pool.sandbox() as box:
        before = box.run_shell(f"{FIND_EXECUTOR}; echo $pid").stdout
        box.run_shell(attempt)  # may end the agent's own processes, and nothing else
        assert box.run_shell(f"{FIND_EXECUTOR}; echo $pid").stdout == before
        assert box.run_shell("echo alive").stdout == "alive\n"
        box.run_python("0")  # if the agent killed its own Python worker, this call says so
        assert box.run_python("1 + 1").stdout == "2\n"
    assert_still_fine(pool)


FORGE_WORKER = textwrap.dedent("""
    import sys
    result = sys.modules["agent.result"].CallResult
    real = result.to_message
    def forged(self):
        message = real(self)
        message.update(oom=True, exit_code=0)
        return message
    result.to_message = forged
""")

GARBAGE_WORKER = textwrap.dedent("""
    import os, socket
    for fd in map(int, os.listdir("/proc/self/fd")):
        try:
            sock = socket.socket(fileno=os.dup(fd))
            if sock.family == socket.AF_UNIX:
                sock.send(b"\\x00\\x00\\x00\\x05{bad}" + b"\\xff" * 64)
        except OSError:
            pass
""")


SCRIBBLE_DEADLINE = textwrap.dedent("""
    import gc, mmap, struct
    for shared in [o for o in gc.get_objects() if isinstance(o, mmap.mmap)]:
        struct.pack_into("d", shared, 0, float("nan"))
    while True:
        pass
""")


def test_the_python_worker_cannot_speak_for_the_executor(pool) -> None:
    with pool.sandbox() as box:
        box.run_python(FORGE_WORKER)
        box.run_python("x = 1")  # the worker now claims an OOM kill: only the executor may
        assert box.run_python("x").stdout == "1\n"
        box.run_python(GARBAGE_WORKER)  # nonsense on the wire is a lost call, not a dead box
        box.run_python("import mmap, struct")
        assert box.run_shell("echo alive").stdout == "alive\n"
        with pytest.raises(SandboxTimeout):
            # NaN in the deadline the executor watches: it still ends the call
            box.run_python(SCRIBBLE_DEADLINE, timeout=1)
    assert_still_fine(pool)


def test_a_worker_killed_for_memory_is_the_agents_oom(pool) -> None:
    with pool.sandbox() as box, pytest.raises(SandboxOOM):
        box.run_python("hog = bytearray(512 << 20)")
    assert_still_fine(pool)


@pytest.mark.parametrize(
    "path",
    ["/proc/self/environ", "/proc/self/maps", "/proc/thread-self/status", "selfie/cmdline"],
)
def test_file_calls_never_reach_the_executors_own_proc_files(pool, path: str) -> None:
    # /proc/self, opened by the executor, is the executor: whatever identity opens it
    with pool.sandbox() as box:
        box.run_shell("ln -s /proc/self selfie")
        with pytest.raises(SandboxFileError):  # not a regular file, or not the agent's to read
            box.read_file(path)
        with pytest.raises(SandboxFileError):
            box.write_file(path, "x")
        with pytest.raises(SandboxFileError):
            box.write_file("/proc/self/fd/1", "x")
    assert_still_fine(pool)
