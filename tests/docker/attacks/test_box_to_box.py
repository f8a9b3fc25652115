"""Box to box: one box never reaches another's sockets, files, processes or IPC."""

from __future__ import annotations

import textwrap

import gymnasium
from attack_kit import assert_still_fine, box_folder

from rollgym.envs.scripted import tool_call

REDIRECT = textwrap.dedent("""
    import os
    target = {target!r}
    for name in ("python.sock", "executor.sock"):
        path = "/run/rollgym/" + name
        try:
            os.symlink(target, path + ".new")
            os.replace(path + ".new", path)
            print("redirected", name)
        except OSError as exc:
            print("refused", name, exc.errno)
    print(os.path.exists(target))
""")

NEIGHBOURS = textwrap.dedent("""
    import os, socket
    seen = []
    own = {os.getpid(), os.getppid()}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            seen.append(open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")[0].decode())
        except OSError:
            pass
    print("secret.txt" in os.listdir("/work"), any("other-box" in c for c in seen))
    peer = socket.socket(socket.AF_UNIX)
    try:
        peer.connect("\\0other-box")
        print("abstract reached")
    except OSError:
        print("abstract refused")
""")


def test_a_box_cannot_redirect_its_sockets_to_another_box(pool) -> None:
    a, b = pool.acquire(), pool.acquire()
    try:
        b.write_file("secret.txt", "B's secret")
        b.run_python("secret = 'B in memory'")
        b.run_shell(
            'python3 -c "import socket,time; s=socket.socket(socket.AF_UNIX); '
            "s.bind('\\0other-box'); s.listen(); time.sleep(60)\" >/dev/null 2>&1 &"
        )
        b.run_shell("ipcmk -M 4096 -p 0666 >/dev/null")
        target = str(box_folder(pool, b.id) / "python.sock")  # the host path of B's socket
        out = a.run_python(REDIRECT.format(target=target)).stdout
        assert out == "refused python.sock 13\nrefused executor.sock 13\nFalse\n"
        assert "NameError" in a.run_python("secret").stderr  # still A's own namespace
        assert a.run_python(NEIGHBOURS).stdout == "False False\nabstract refused\n"
        assert a.run_shell("ipcs -m | grep -c 0x || true").stdout == "0\n"
        assert b.run_python("secret").stdout == "'B in memory'\n"
    finally:
        pool.release(a)
        pool.release(b)
    assert_still_fine(pool)


def test_a_tool_use_episode_cannot_reach_another_episodes_box(pool) -> None:
    victim = gymnasium.make("rollgym/ToolUse-v0", sandbox_pool=pool)
    attacker = gymnasium.make("rollgym/ToolUse-v0", sandbox_pool=pool)
    victim.reset(options={"task_id": "power-of-two"})
    victim.step(tool_call("write_file", {"path": "answer-cache.txt", "content": "42"}))
    attacker.reset(options={"task_id": "power-of-two"})
    victim_box = victim.unwrapped._box.id
    target = str(box_folder(pool, victim_box) / "python.sock")
    obs, _, _, truncated, info = attacker.step(
        tool_call("python", {"code": REDIRECT.format(target=target)})
        + tool_call("python", {"code": "open('answer-cache.txt').read()"})
        + tool_call("read_file", {"path": "answer-cache.txt"})
    )
    texts = [message["content"] for message in obs]
    assert texts[0].startswith("refused python.sock 13\nrefused executor.sock 13")
    assert "FileNotFoundError" in texts[1] and texts[2].startswith("error: read_file")
    assert not truncated and info["failure"] == "task"
    attacker.close()
    victim.close()
    assert_still_fine(pool)


KEYRING = textwrap.dedent("""
    import ctypes, os
    libc = ctypes.CDLL(None, use_errno=True)
    SYS_ADD_KEY, SYS_KEYCTL, KEY_SPEC_USER_KEYRING = 248, 250, -4
    added = libc.syscall(SYS_ADD_KEY, b"user", b"note", b"data", 4, KEY_SPEC_USER_KEYRING)
    read = libc.syscall(SYS_KEYCTL, 11, KEY_SPEC_USER_KEYRING, None, 0)  # KEYCTL_READ
    print(added, read)
""")


def test_the_users_kernel_keyring_is_no_channel_between_boxes(pool) -> None:
    # Keys are not namespaced: every box's agent has the same uid, so one user keyring.
    with pool.sandbox() as box:
        assert box.run_python(KEYRING).stdout == "-1 -1\n"
    assert_still_fine(pool)
