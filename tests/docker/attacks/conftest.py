"""Fixtures of the attack suite (see ``attack_kit`` for what the suite is)."""

from __future__ import annotations

import pytest
from attack_kit import quiet_pool


@pytest.fixture(scope="module")
def pool():
    with quiet_pool() as pool:
        yield pool
