"""The set-up's Docker engine and base image, on the real engine."""

import os

BASE_IMAGE = os.environ.get("ROLLGYM_BASE_IMAGE", "rollgym/base:bookworm")


def test_dockerd_answers(docker_client) -> None:
    assert docker_client.ping() is True
    assert docker_client.version()["Version"]


def test_base_image_runs_python_without_network(docker_client) -> None:
    code = (
        "import socket, sys\n"
        "print(sys.version_info[:2])\n"
        "try:\n"
        "    socket.create_connection(('1.1.1.1', 53), timeout=2)\n"
        "    print('network: reachable')\n"
        "except OSError:\n"
        "    print('network: none')\n"
        "print(sorted(n for _, n in socket.if_nameindex()))\n"
    )
    out = docker_client.containers.run(
        BASE_IMAGE, ["python3", "-c", code], network_mode="none", remove=True
    ).decode()
    assert "(3, 11)" in out
    assert "network: none" in out
    assert "['lo']" in out
