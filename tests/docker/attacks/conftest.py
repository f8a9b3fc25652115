"""Fixtures of the attack suite (see ``attack_kit`` for what the suite is)."""

from __future__ import annotations

import pytest
from attack_kit import quiet_pool

# The boundaries where the box's host matters run on both engines; the host's own judging
# and parsing (agent text, failure kinds, rewards, Harbor's verifier) is the same code
# whichever engine runs the box: this machine's only.
BOTH = ("local", "remote")
ONLY_LOCAL = {"test_agent_text", "test_failure_kinds", "test_reward_forgery", "test_harbor_attacks"}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "pool" in metafunc.fixturenames:
        name = metafunc.module.__name__.rpartition(".")[2]
        backends = ("local",) if name in ONLY_LOCAL else BOTH
        metafunc.parametrize("pool", backends, indirect=True, scope="module")


@pytest.fixture(scope="module")
def pool(request):
    """The attacks' pool, on this machine's Docker engine or on a remote host's."""
    remote = request.getfixturevalue("remote_docker_host") if request.param == "remote" else None
    with quiet_pool(remote=remote) as pool:
        yield pool
