"""The e2e tier's session hooks: the tests that run the app image (the compose test, the
second Ray node) run last, on the image built in the background from the start of the
session (``app_image``)."""

from __future__ import annotations

from pathlib import Path

import app_image
import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The image's tests last: the image then has the whole session to build."""
    last = sorted(
        (item for item in items if Path(item.path) in app_image.IMAGE_TESTS),
        key=lambda item: app_image.IMAGE_TESTS.index(Path(item.path)),
    )
    items[:] = [item for item in items if item not in last] + last


def pytest_collection_finish(session: pytest.Session) -> None:
    app_image.start_if_needed(session)


def pytest_sessionfinish(session: pytest.Session) -> None:
    app_image.stop(session.config)
