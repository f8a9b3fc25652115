"""The e2e tier's session hooks: the compose test runs last, on an app image built in the
background from the start of the session (``app_image``)."""

from __future__ import annotations

from pathlib import Path

import app_image
import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The compose test last: its image then has the whole session to build."""
    compose = [item for item in items if Path(item.path) == app_image.COMPOSE_TEST]
    items[:] = [item for item in items if item not in compose] + compose


def pytest_collection_finish(session: pytest.Session) -> None:
    app_image.start_if_needed(session)


def pytest_sessionfinish(session: pytest.Session) -> None:
    app_image.stop(session.config)
