"""requirements/gpu.txt, the GPU hosts' lock, agrees with what it is resolved from
(requirements/gpu.in) and with the CPU lock's engine; scripts/lock_gpu.sh writes it, and the
real check, installing it on a CUDA host, needs a GPU this project's machines lack."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]


def requirements(path: Path) -> list[Requirement]:
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return [Requirement(line) for line in lines if line]


def lock() -> dict[str, str]:
    pins = {}
    for requirement in requirements(ROOT / "requirements/gpu.txt"):
        (spec,) = requirement.specifier
        assert spec.operator == "==", f"{requirement} is not pinned"
        pins[canonicalize_name(requirement.name)] = spec.version
    return pins


def test_every_direct_dependency_is_locked_inside_its_range() -> None:
    pins = lock()
    for requirement in requirements(ROOT / "requirements/gpu.in"):
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} of gpu.in is not in the lock"
        assert requirement.specifier.contains(pins[name], prereleases=True), (name, pins[name])


def test_the_lock_serves_the_cpu_locks_vllm_release_with_cuda_torch() -> None:
    pins = lock()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (cpu_engine,) = (Requirement(r) for r in project["optional-dependencies"]["cpu"])
    assert SpecifierSet(str(cpu_engine.specifier)).contains(pins["vllm"])
    for dependency in map(Requirement, project["dependencies"]):
        name = canonicalize_name(dependency.name)
        if name in pins:
            assert dependency.specifier.contains(pins[name], prereleases=True), (name, pins[name])
    assert "+" not in pins["torch"]  # PyPI's CUDA build, not a local +cpu one
    assert any(name.startswith("nvidia-nccl") for name in pins)
