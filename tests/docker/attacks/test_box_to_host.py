"""Box to host: the host's disk, the executor's sockets, host files, the Docker socket,
mounts, capabilities and the network, all out of the agent's reach."""

from __future__ import annotations

import textwrap

import pytest
from attack_kit import assert_still_fine, runtime_files

RUNTIME = "/run/rollgym"


@pytest.mark.parametrize(
    "attempt",
    [
        f"echo x > {RUNTIME}/note",
        f"dd if=/dev/zero of={RUNTIME}/big bs=1M count=64",
        f"mkdir {RUNTIME}/dir",
        f"ln -s /work {RUNTIME}/link",
        f"mkfifo {RUNTIME}/fifo",
        f"ls {RUNTIME}",
        f"touch {RUNTIME}/../x /opt/rollgym/agent/x.py /x /etc/x /usr/x /var/x",
        f"cp /bin/sh {RUNTIME}/executor.sock",
    ],
)
def test_nothing_reaches_the_hosts_disk(pool, attempt: str) -> None:
    with pool.sandbox() as box:
        result = box.run_shell(attempt)
        assert not result.ok
        assert "Permission denied" in result.stderr or "Read-only" in result.stderr
        assert runtime_files(pool, box.id) == ["executor.sock", "python.sock"]
    assert_still_fine(pool)


HIJACK = textwrap.dedent("""
    import os, socket, struct, json
    for name in ("executor.sock", "python.sock"):
        path = "/run/rollgym/" + name
        for step in (lambda: os.unlink(path), lambda: os.rename(path, path + ".old")):
            try:
                step()
                print("removed", name)
            except OSError as exc:
                print("refused", name, exc.errno)
        server = socket.socket(socket.AF_UNIX)
        try:
            server.bind(path)
            print("bound", name)
        except OSError as exc:
            print("refused", name, exc.errno)
""")


def test_the_executors_sockets_cannot_be_replaced(pool) -> None:
    with pool.sandbox() as box:
        box.write_file("hijack.py", HIJACK)
        # a listener that would answer every request with a forged result
        out = box.run_shell("python3 hijack.py").stdout
        assert "removed" not in out and "bound" not in out and out.count("refused") == 6
        assert box.run_shell("echo real").stdout == "real\n"
        assert box.run_python("'real'").stdout == "'real'\n"
    assert_still_fine(pool)


@pytest.mark.parametrize(
    "path",
    [
        "/proc/1/root/etc/shadow",
        "/proc/1/environ",
        "/proc/1/cwd",
        "/etc/shadow",
        "/var/run/docker.sock",
        "/run/docker.sock",
        "/var/lib/docker",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",  # readable, but never writable
    ],
)
def test_host_files_and_the_docker_socket_are_out_of_reach(pool, path: str) -> None:
    with pool.sandbox() as box:
        write = box.run_shell(f"echo 1 > {path}")
        assert not write.ok
        if not path.startswith("/sys"):
            assert not box.run_shell(f"head -c1 {path} || ls -A {path}/").ok
        assert (
            box.run_shell("find / -name docker.sock -not -path '/proc/*' 2>/dev/null").stdout == ""
        )
    assert_still_fine(pool)


@pytest.mark.parametrize(
    "attempt",
    [
        "mount -t tmpfs none /tmp/m",
        "unshare -r id",
        "unshare -m id",
        "python3 -c 'import os; os.setuid(0)'",
        "python3 -c 'import os; os.setgid(0)'",
        "su -c id root </dev/null",
        "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, 1)'",
        "chown root /work",
        "mknod /tmp/disk b 8 0",
        "chroot / id",
    ],
)
def test_no_privilege_can_be_gained(pool, attempt: str) -> None:
    with pool.sandbox() as box:
        result = box.run_shell(attempt)
        assert not result.ok, result
        status = box.run_shell("grep -E '^(Uid|CapEff|CapPrm|CapAmb|NoNewPrivs)' /proc/self/status")
        assert "CapEff:\t0000000000000000" in status.stdout
        assert "CapPrm:\t0000000000000000" in status.stdout
        assert "NoNewPrivs:\t1" in status.stdout
    assert_still_fine(pool)


EGRESS = textwrap.dedent("""
    import socket
    reached = []
    for host, port in (("1.1.1.1", 53), ("8.8.8.8", 443), ("172.17.0.1", 2375), ("10.0.0.1", 80)):
        try:
            socket.create_connection((host, port), timeout=2).close()
            reached.append(host)
        except OSError:
            pass
    try:
        socket.getaddrinfo("example.com", 80)
        reached.append("dns")
    except OSError:
        pass
    print(reached, sorted(name for _, name in socket.if_nameindex()))
""")


def test_no_network_leaves_the_box(pool) -> None:
    with pool.sandbox() as box:
        assert box.run_python(EGRESS).stdout == "[] ['lo']\n"
        assert not box.run_shell("cat < /dev/tcp/1.1.1.1/53").ok
    assert_still_fine(pool)
