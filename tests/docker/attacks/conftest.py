"""Fixtures of the attack suite (see ``attack_kit`` for what the suite is)."""

from __future__ import annotations

import pytest
from attack_kit import quiet_pool


@pytest.fixture(scope="module", params=["local", "remote"])
def pool(request):
    """The attacks' pool, on this machine's Docker engine and on a remote host's."""
    remote = request.getfixturevalue("remote_docker_host") if request.param == "remote" else None
    with quiet_pool(remote=remote) as pool:
        yield pool
