"""mypy over every module of the packages, each under the one name it imports as.

pyproject's ``package-dir`` makes the top-level folders rollgym's subpackages
(``server/app.py`` is ``rollgym.server.app``). mypy names a file by its path (``server.app``)
and cannot follow such a mapping, so this hands it the same folders with every module
renamed to its installed name: imports between the packages then resolve to the files
themselves, and the settings are pyproject's ``[tool.mypy]``.

    .venv/bin/python scripts/typecheck.py           # make typecheck; other arguments go to mypy
"""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path

from mypy import build
from mypy.errors import CompileError
from mypy.main import process_options
from mypy.modulefinder import BuildSource

ROOT = Path(__file__).resolve().parents[1]


def package_names() -> dict[str, str]:
    """Each mapped folder's name and the package it is (``server`` -> ``rollgym.server``)."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {folder: package for package, folder in setuptools["package-dir"].items()}


def installed(source: BuildSource, packages: dict[str, str]) -> BuildSource:
    """``source`` (named ``server.app`` by its path) named ``rollgym.server.app``."""
    assert source.module is not None
    top, _, rest = source.module.partition(".")
    name = ".".join(filter(None, [packages[top], rest]))
    return BuildSource(source.path, name, source.text, source.base_dir)


def main(argv: list[str]) -> int:
    os.chdir(ROOT)
    packages = package_names()
    sources, options = process_options([*argv, *packages], stdout=sys.stdout, stderr=sys.stderr)
    named = [installed(source, packages) for source in sources]
    try:
        messages = build.build(named, options).errors
    except CompileError as exc:  # a blocking error (a syntax error...)
        messages = exc.messages
    for message in messages:
        print(message)
    errors = sum(": error:" in m for m in messages)
    if errors:
        print(f"Found {errors} errors in {len(named)} source files")
        return 1
    print(f"Success: no issues found in {len(named)} source files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
