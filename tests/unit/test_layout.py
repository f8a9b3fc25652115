"""The package layout holds: one namespace, layers that import only downward, no cycles.

Layers, bottom to top (a package may import its own layer and the layers below it)::

    rollgym.contract                 wire and dashboard schemas, staleness rule, paths
    rollgym.sandboxes                Docker boxes
    rollgym.envs                     Gymnasium environments
    rollgym.server                   the rollout server
    rollgym.trainer                  the trainer library: contract only (it talks HTTP)
    rollgym.cluster                  servers on Ray behind a router: above the server
    rollgym.run, rollgym.cli, ...    the applications on top

Every import counts, including those inside functions (lazy imports are still arrows).
"""

from __future__ import annotations

import ast
import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "rollgym"
ALLOWED: dict[str, set[str]] = {
    "contract": set(),
    "sandboxes": {"contract"},
    "envs": {"contract", "sandboxes"},
    "server": {"contract", "sandboxes", "envs"},
    "trainer": {"contract"},
    "cluster": {"contract", "sandboxes", "envs", "server"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def modules() -> dict[str, Path]:
    """Every module of the installed tree (``rollgym/<name>`` links to the top folders)."""
    found = {}
    for folder, _, files in os.walk(PACKAGE, followlinks=True):
        for file in files:
            path = Path(folder) / file
            # the in-box executor (sandboxes/agent) runs as its own package, stdlib only
            if path.suffix == ".py" and path.relative_to(PACKAGE).parts[:2] != (
                "sandboxes",
                "agent",
            ):
                found[module_name(path)] = path
    return found


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


def test_the_namespace_package_imports_nothing() -> None:
    assert imports_of("rollgym", PACKAGE / "__init__.py") == set()


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


def test_no_string_names_a_module_outside_the_namespace() -> None:
    """Modules named in strings (vLLM's worker extension, entry points, ``-m`` targets)
    must be ``rollgym.*``: from the repository root a top-level name would still import,
    and fail only where rollgym is installed."""
    bare = re.compile(r"^(sandboxes|envs|server|trainer|cluster)(\.[A-Za-z_]\w*)+(:\w+)?$")
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


@pytest.mark.parametrize("top", ["sandboxes", "envs", "server", "trainer", "cluster"])
def test_packages_import_only_under_the_rollgym_namespace(tmp_path, top: str) -> None:
    """Outside the repository, ``import server`` fails and ``import rollgym.server`` works."""
    code = (
        f"import importlib.util, rollgym.{top}\n"
        f"assert importlib.util.find_spec({top!r}) is None, 'top-level {top} is importable'\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
