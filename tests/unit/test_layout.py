"""The package layout holds: one name per module, layers that import only downward, no cycles.

pyproject's ``package-dir`` makes each top-level folder a subpackage of the one namespace
(``server/app.py`` is ``rollgym.server.app``, and has no other name). Layers, bottom to
top (a package may import its own layer and the layers below it)::

    rollgym.contract                 the API declared once, schemas, the run's shape, rules
    rollgym.sandboxes                Docker boxes
    rollgym.envs                     Gymnasium environments
    rollgym.engine                   the engine floor: vLLM, weight updates (no HTTP)
    rollgym.server                   the rollout server: the HTTP application on the engine
    rollgym.trainer                  the trainer library: contract only (it talks HTTP)
    rollgym.cluster                  servers on Ray behind a router: above the server
    rollgym.run, rollgym.cli, ...    the applications on top

The engine floor imports the contract alone: nothing of the server's HTTP application.
Inside a package, a floor imports nothing of the package around it (``FLOORS``): the
server's HTTP face (``rollgym.server.http``), which the cluster's router shares. Every import
counts, including those inside functions (lazy imports are still arrows).
"""

from __future__ import annotations

import ast
import functools
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
FOLDERS: dict[str, Path] = {
    name: ROOT / folder for name, folder in SETUPTOOLS["package-dir"].items()
}
# The top-level folders that are rollgym's subpackages: never imported under their own name.
TOPS = {folder.name for name, folder in FOLDERS.items() if name != "rollgym"}
ALLOWED: dict[str, set[str]] = {
    "contract": set(),
    "sandboxes": {"contract"},
    "envs": {"contract", "sandboxes"},
    "engine": {"contract"},
    "server": {"contract", "sandboxes", "envs", "engine"},
    "trainer": {"contract"},
    "cluster": {"contract", "sandboxes", "envs", "engine", "server"},
}
# Floors inside a package: a subpackage that imports nothing of rollgym but itself and these
# (the HTTP face is shared with the cluster's router; the rest of the server sits on it).
FLOORS: dict[str, tuple[str, ...]] = {"rollgym.server.http": ("rollgym.contract",)}
# The in-box executor (sandboxes/agent) also runs in the box as its own package, stdlib only.
EXECUTOR = FOLDERS["rollgym.sandboxes"] / "agent"


def module_name(path: Path) -> str:
    """The one name of the module at ``path`` (``rollgym.server.app`` for server/app.py)."""
    for package, folder in FOLDERS.items():
        if path.is_relative_to(folder):
            parts = [*path.relative_to(folder).parent.parts, path.stem]
            return ".".join([package, *(parts[:-1] if parts[-1] == "__init__" else parts)])
    raise ValueError(f"{path} is in no package folder")


def package_files() -> list[Path]:
    """Every ``.py`` file of the package folders (links are not followed: there are none)."""
    return sorted(
        Path(folder) / file
        for top in FOLDERS.values()
        for folder, _, files in os.walk(top)
        for file in files
        if file.endswith(".py")
    )


@functools.cache
def modules() -> dict[str, Path]:
    """Every module of the packages but the in-box executor, by its one name."""
    return {module_name(p): p for p in package_files() if not p.is_relative_to(EXECUTOR)}


def imports_of(name: str, path: Path) -> set[str]:
    """The ``rollgym`` modules that ``name`` imports, anywhere in its body."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    # ``from rollgym import envs`` names rollgym.envs; the bare namespace imports nothing
    return {m for m in found if m in modules() and m not in (name, "rollgym")}


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ALLOWED else "application"


# --- one name per module --------------------------------------------------------------------


def test_every_module_file_has_one_name() -> None:
    """No folder is mapped twice or inside another, and nothing in them is a link (a link
    is a second path to a module, as ``rollgym/server -> ../server`` once was)."""
    folders = list(FOLDERS.values())
    assert len(set(folders)) == len(folders)
    assert not [(a, b) for a in folders for b in folders if a != b and a.is_relative_to(b)]
    links = [
        Path(folder) / entry
        for top in folders
        for folder, dirs, files in os.walk(top)
        for entry in dirs + files
        if (Path(folder) / entry).is_symlink()
    ]
    assert links == []
    assert len({module_name(p) for p in package_files()}) == len(package_files())


def test_pyproject_lists_every_subpackage_and_test_path() -> None:
    """The wheel holds exactly the folders with an ``__init__.py``, and pytest collects
    every package folder (for the doctests)."""
    found = {module_name(p) for p in package_files() if p.name == "__init__.py"}
    assert set(SETUPTOOLS["packages"]) == found
    pytest_ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    testpaths = {ROOT / p for p in pytest_ini["ini_options"]["testpaths"]}
    assert set(FOLDERS.values()) <= testpaths


def test_the_installed_packages_are_these_folders() -> None:
    """The editable install maps what pyproject maps (run ``pip install -e .`` after a change)."""
    import importlib.util

    for package, folder in FOLDERS.items():
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.origin == str(folder / "__init__.py"), package


def test_no_import_names_a_package_folder_bare() -> None:
    """``from sandboxes.base import X`` imports from the repository root, as a second copy
    of ``rollgym.sandboxes.base``, and fails where rollgym is installed: anywhere in the
    repository, a package folder is imported only as ``rollgym.<folder>``."""
    skip = {ROOT / ".venv", ROOT / "build", EXECUTOR}
    bare = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if Path(folder) / d not in skip and not d.startswith(".")]
        for file in (f for f in files if f.endswith(".py")):
            path = Path(folder) / file
            for node in ast.walk(ast.parse(path.read_text())):
                names = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    names = [node.module]
                bare += [
                    f"{path.relative_to(ROOT)}:{node.lineno}: {n}"
                    for n in names
                    if n.split(".")[0] in TOPS
                ]
    assert bare == []


@pytest.mark.parametrize("top", sorted(TOPS))
def test_a_package_folder_imports_only_under_the_namespace(tmp_path, top: str) -> None:
    """Outside the repository ``import server`` finds nothing; in it (the folder is on the
    path) it fails with the name to use, and ``rollgym.server`` is the package."""
    outside = (
        f"import importlib.util, rollgym.{top}\n"
        f"assert importlib.util.find_spec({top!r}) is None, 'top-level {top} is importable'\n"
    )
    inside = (
        f"import importlib, rollgym.{top}\n"
        f"try:\n    importlib.import_module({top!r})\n"
        f"except ImportError as exc:\n    assert 'rollgym.{top}' in str(exc), exc\n"
        f"else:\n    raise AssertionError('{top} imports as a second copy')\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    for code, cwd in ((outside, tmp_path), (inside, ROOT)):
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr


def test_no_string_names_a_module_outside_the_namespace() -> None:
    """Modules named in strings (vLLM's worker extension, entry points, ``-m`` targets)
    must be ``rollgym.*``: from the repository root a top-level name would still resolve,
    and fail only where rollgym is installed."""
    bare = re.compile(rf"^({'|'.join(sorted(TOPS))})(\.[A-Za-z_]\w*)+(:\w+)?$")
    found = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            text = node.value if isinstance(node, ast.Constant) else None
            if isinstance(text, str) and bare.match(text) and not text.endswith((".log", ".json")):
                found.append(f"{name}: {text!r}")
            found += [f"{name}: {arg!r}" for arg in _packages_named_in_calls(node)]
    assert found == []


def _packages_named_in_calls(node: ast.AST) -> list[str]:
    """Package names given to ``resources.files("...")`` or ``import_module("...")``
    that are not under ``rollgym``."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name)):
        return []
    called = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
    if called not in ("files", "import_module") or not node.args:
        return []
    arg = node.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [] if arg.value.split(".")[0] == "rollgym" else [arg.value]
    return []


# --- layers -----------------------------------------------------------------------------------


def test_no_package_imports_upward() -> None:
    upward = []
    for name, path in modules().items():
        here = layer(name)
        if here == "application":
            continue
        for target in imports_of(name, path):
            there = layer(target)
            if there != here and there not in ALLOWED[here]:
                upward.append(f"{name} -> {target}")
    assert upward == []


def test_the_floors_inside_packages_import_only_what_is_under_them() -> None:
    above = []
    for floor, allowed in FLOORS.items():
        for name, path in modules().items():
            if name == floor or name.startswith(floor + "."):
                above += [
                    f"{name} -> {target}"
                    for target in imports_of(name, path)
                    if not target.startswith((floor, *allowed))
                ]
    assert above == []


def test_the_namespace_package_imports_nothing() -> None:
    assert imports_of("rollgym", FOLDERS["rollgym"] / "__init__.py") == set()


def test_the_contract_imports_nothing_of_rollgym_but_itself() -> None:
    for name, path in modules().items():
        if layer(name) == "contract":
            assert {layer(t) for t in imports_of(name, path)} <= {"contract"}, name


def test_no_import_cycle_between_modules() -> None:
    """Module-level imports only: a lazy import inside a function cannot form a load cycle."""
    graph = {}
    for name, path in modules().items():
        tree = ast.parse(path.read_text())
        top = ast.Module(body=[n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)])
        path_imports = set()
        for node in ast.walk(top):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                path_imports.add(node.module)
                path_imports |= {f"{node.module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                path_imports |= {a.name for a in node.names}
        graph[name] = {m for m in path_imports if m in modules() and m != name}
        # a package's __init__ importing its own submodules is how packages work
        graph[name] = {m for m in graph[name] if not m.startswith(name + ".")}
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                pytest.fail("import cycle: " + " -> ".join([*trail, node, nxt]))
            if nxt not in state:
                visit(nxt, [*trail, node])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
