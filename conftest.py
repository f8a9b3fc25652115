"""The packages' ``>>>`` examples, collected under the one name each module imports as.

pyproject's ``package-dir`` makes the top-level folders rollgym's subpackages: ``server/app.py``
is ``rollgym.server.app``. Pytest names a module by its path (``server.app``) and would
load a second copy under that name, so ``--doctest-modules`` is off and this collects the
examples instead: the package folders are plain folders to pytest (``pytest.Dir``: nothing
is imported by path), and each module is imported by its installed name. The examples run
as unit tests (tests/conftest.py marks them).
"""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
from _pytest.doctest import DoctestModule

ROOT = Path(__file__).resolve().parent


def _package_folders() -> dict[Path, str]:
    """Each folder pyproject's ``package-dir`` maps, and the package it is."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {ROOT / folder: package for package, folder in setuptools["package-dir"].items()}


FOLDERS = _package_folders()


def installed_name(path: Path) -> str | None:
    """``rollgym.server.app`` for ``server/app.py`` (``rollgym.server`` for the folder or its
    ``__init__.py``); None outside the package folders."""
    for folder, package in FOLDERS.items():
        if path.is_relative_to(folder):
            parts = [*path.relative_to(folder).parent.parts, path.stem]
            if path == folder or parts[-1] == "__init__":
                parts.pop()
            return ".".join([package, *parts])
    return None


class InstalledDoctests(DoctestModule):
    """A module's doctests, the module imported by its installed name."""

    def _getobj(self) -> ModuleType:
        name = installed_name(self.path)
        assert name is not None
        return importlib.import_module(name)


def pytest_collect_directory(path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if installed_name(path) is None:
        return None
    return pytest.Dir.from_parent(parent, path=path)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix != ".py" or installed_name(file_path) is None:
        return None
    if parent.session.isinitpath(file_path):  # named on the command line: the hook below
        return None
    return InstalledDoctests.from_parent(parent, path=file_path)


def pytest_pycollect_makemodule(
    module_path: Path, parent: pytest.Collector
) -> pytest.Module | None:
    """A package module named on the command line (``pytest envs/core.py``): its doctests
    too, never the module imported by its path."""
    if installed_name(module_path) is None:
        return None
    return InstalledDoctests.from_parent(parent, path=module_path)  # type: ignore[return-value]
