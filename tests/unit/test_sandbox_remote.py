"""The remote backend's pure parts: its settings, the relayed box's spec, the exec stream's
framing, the relay's checks and the executor's admission of the relay's user.

The real twin of each is in tests/docker (the attack suite on a remote engine,
test_remote_sandboxes.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from pydantic import ValidationError

from rollgym.sandboxes.agent import relay
from rollgym.sandboxes.agent.identity import User
from rollgym.sandboxes.agent.server import from_user, listen
from rollgym.sandboxes.base import SandboxError
from rollgym.sandboxes.config import RemoteHost, SandboxConfig
from rollgym.sandboxes.docker.engine import tls_config
from rollgym.sandboxes.docker.provider import BOX_AGENT_DIR, BOX_RUNTIME_DIR, relayed_spec
from rollgym.sandboxes.docker.relay import STREAM_HEADER, ExecStream
from rollgym.server.config import SandboxSettings

AGENT_DIR = Path(relay.__file__).parent


@pytest.mark.parametrize(
    ("url", "cert_dir", "message"),
    [
        ("unix:///var/run/docker.sock", "/certs", "tcp://HOST:PORT with TLS"),
        ("http://10.0.0.7:2375", "/certs", "tcp://HOST:PORT with TLS"),
        ("tcp://10.0.0.7:2376", "certs", "absolute folder"),
    ],
)
def test_a_remote_host_is_tcp_with_certificates(url: str, cert_dir: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        RemoteHost(url=url, cert_dir=cert_dir)


def test_missing_certificates_are_named(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("x")
    with pytest.raises(SandboxError, match=r"lacks cert\.pem, key\.pem"):
        tls_config(RemoteHost(url="tcp://10.0.0.7:2376", cert_dir=str(tmp_path)))


def test_the_engines_ca_is_not_replaced_by_the_environments(tmp_path: Path) -> None:
    for name in ("ca.pem", "cert.pem", "key.pem"):
        (tmp_path / name).write_text("x")
    session = requests.Session()
    tls_config(RemoteHost(url="tcp://10.0.0.7:2376", cert_dir=str(tmp_path))).configure_client(
        session
    )
    assert session.verify == str(tmp_path / "ca.pem")
    assert session.cert == (str(tmp_path / "cert.pem"), str(tmp_path / "key.pem"))
    assert session.trust_env is False  # REQUESTS_CA_BUNDLE would otherwise win


def test_the_settings_choose_a_backend() -> None:
    remote = {"url": "tcp://10.0.0.7:2376", "cert_dir": "/certs"}
    assert SandboxSettings().backend == "local"
    assert SandboxSettings(backend="remote", remote=remote).remote == RemoteHost(**remote)
    with pytest.raises(ValidationError, match="backend=remote needs the host"):
        SandboxSettings(backend="remote")
    with pytest.raises(ValidationError, match="backend is local"):
        SandboxSettings(remote=remote)


def test_a_relayed_box_has_no_host_folder_and_admits_its_relay_alone() -> None:
    spec = relayed_spec(SandboxConfig(), "rollgym-sbx-p-agent", User(61002, 61002))
    assert [m["Type"] for m in spec["mounts"]] == ["volume"]  # no bind mount of any host path
    (code,) = spec["mounts"]
    assert code["Target"] == BOX_AGENT_DIR and code["Source"] == "rollgym-sbx-p-agent"
    assert code["ReadOnly"]
    runtime = spec["tmpfs"][BOX_RUNTIME_DIR]
    assert "uid=61002" in runtime and "mode=0700" in runtime and "noexec" in runtime
    command = spec["command"]
    assert "--relayed" in command and command[command.index("--host-user") + 1] == "61002:61002"
    assert spec["network_mode"] == "none" and spec["cap_drop"] == ["ALL"]


def _engine_frames(*frames: tuple[int, bytes]) -> bytes:
    return b"".join(STREAM_HEADER.pack(kind, len(data)) + data for kind, data in frames)


def test_the_exec_stream_reads_stdout_frames_as_one_stream() -> None:
    ours, engine = socket.socketpair()
    engine.sendall(_engine_frames((1, b"hello "), (1, b"world")))
    engine.close()
    stream = ExecStream(ours)
    received = b""
    while chunk := stream.recv(4):
        received += chunk
    assert received == b"hello world"


def test_the_relays_refusal_ends_the_stream_with_its_words() -> None:
    ours, engine = socket.socketpair()
    engine.sendall(_engine_frames((2, b"agent.relay: not a socket\n")))
    engine.close()
    with pytest.raises(ConnectionError, match=r"agent\.relay: not a socket"):
        ExecStream(ours).recv(64)


def test_a_stream_cut_inside_a_frame_is_an_error() -> None:
    ours, engine = socket.socketpair()
    engine.sendall(STREAM_HEADER.pack(1, 10) + b"abc")
    engine.close()
    stream = ExecStream(ours)
    assert stream.recv(64) == b"abc"
    with pytest.raises(ConnectionError, match="inside a frame"):
        stream.recv(64)


@pytest.fixture
def socket_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "run"
    folder.mkdir(mode=0o700)
    return folder


def test_the_relay_refuses_a_folder_others_may_enter(socket_folder: Path) -> None:
    server = listen(str(socket_folder / "executor.sock"))
    socket_folder.chmod(0o755)
    with pytest.raises(ConnectionError, match="not a folder of uid"):
        relay.connect(str(socket_folder / "executor.sock"), os.getuid(), 0)
    server.close()


def test_the_relay_refuses_a_link_and_a_stranger_listener(socket_folder: Path) -> None:
    server = listen(str(socket_folder / "real.sock"))
    (socket_folder / "executor.sock").symlink_to(socket_folder / "real.sock")
    with pytest.raises(ConnectionError, match="not a socket owned by"):
        relay.connect(str(socket_folder / "executor.sock"), os.getuid(), 0)
    with pytest.raises(ConnectionError, match="is served by uid"):
        relay.connect(str(socket_folder / "real.sock"), os.getuid() + 1, 0)
    server.close()


def test_the_relay_waits_for_the_socket_only_so_long(socket_folder: Path) -> None:
    with pytest.raises(ConnectionError, match="did not appear within"):
        relay.connect(str(socket_folder / "executor.sock"), os.getuid(), 0.05)


def test_the_relay_splices_its_stdin_and_stdout_to_the_socket(socket_folder: Path) -> None:
    path = socket_folder / "executor.sock"
    server = listen(str(path))
    child = subprocess.Popen(
        [sys.executable, "-m", "agent.relay", str(path), "--listener-uid", str(os.getuid())],
        cwd=AGENT_DIR.parent,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    conn, _ = server.accept()
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write(b"ping")
    child.stdin.flush()
    assert conn.recv(16) == b"ping"
    conn.sendall(b"pong")
    assert child.stdout.read(4) == b"pong"
    child.stdin.close()  # the host is gone: the executor's side sees the end of the stream
    assert conn.recv(16) == b""
    conn.close()
    assert child.wait(timeout=30) == 0
    server.close()


def test_a_relayed_executor_admits_the_relays_user_alone() -> None:
    ours, peer = socket.socketpair()
    assert from_user(os.getuid())(ours)
    assert not from_user(os.getuid() + 1)(ours)
    ours.close()
    peer.close()
