"""Which Docker engine runs the boxes: this machine's, or a remote host's over mutual TLS.

``RemoteHost`` names a Docker engine on another machine that listens on TCP with
``--tlsverify``: only clients with a certificate signed by its CA get in, and this side
checks the engine's certificate against that CA alone (a CA bundle named by the
environment, ``REQUESTS_CA_BUNDLE`` for one, never replaces it). A plain TCP engine is
refused: whoever reaches its port owns the host. ``engine_client(None)`` is the local
engine (``DOCKER_HOST`` or its unix socket).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import requests
from docker.tls import TLSConfig

import docker

from ..base import SandboxError
from ..config import RemoteHost

CERT_FILES = ("ca.pem", "cert.pem", "key.pem")  # DOCKER_CERT_PATH's layout


def tls_config(remote: RemoteHost) -> TLSConfig:
    """Mutual TLS with the files of ``remote.cert_dir``; ``SandboxError`` when one is missing."""
    missing = [name for name in CERT_FILES if not os.path.isfile(f"{remote.cert_dir}/{name}")]
    if missing:
        raise SandboxError(
            f"{remote.cert_dir} lacks {', '.join(missing)}: put the engine's CA and this "
            "client's certificate and key there (scripts/remote_dockerd.sh makes a set)"
        )
    ca, cert, key = (f"{remote.cert_dir}/{name}" for name in CERT_FILES)
    return _PinnedTLS(client_cert=(cert, key), ca_cert=ca, verify=True)


class _PinnedTLS(TLSConfig):
    """TLS whose CA is the remote engine's alone.

    requests lets ``REQUESTS_CA_BUNDLE`` (set on many machines) replace a session's CA
    file; a session that ignores the environment keeps the one given here.
    """

    def configure_client(self, client: Any) -> None:
        super().configure_client(client)
        client.trust_env = False


@contextlib.contextmanager
def docker_errors(action: str) -> Iterator[None]:
    """Translate the Docker SDK's errors (and its HTTP layer's) into ``SandboxError``."""
    try:
        yield
    except docker.errors.ImageNotFound as exc:
        raise SandboxError(
            f"{action}: image not found ({exc.explanation}); run scripts/setup.sh to build "
            "the sandbox images, or set SandboxConfig.image"
        ) from exc
    except docker.errors.DockerException as exc:
        raise SandboxError(f"{action}: {exc}") from exc
    except requests.RequestException as exc:
        raise SandboxError(f"{action}: the Docker engine does not answer ({exc})") from exc


def engine_client(remote: RemoteHost | None) -> docker.DockerClient:
    """A client of the engine that runs the boxes; ``SandboxError`` when it does not answer."""
    where = f"the Docker engine at {remote.url}" if remote else "the Docker engine"
    with docker_errors(f"connecting to {where}"):
        if remote is None:
            return docker.from_env()
        return docker.DockerClient(base_url=remote.url, tls=tls_config(remote))
