"""Shared test set-up: tier markers by folder, and the real components the tiers need.

Tests live in ``tests/<tier>/``; each test gets its folder's marker (unit, docker, engine,
e2e), so ``pytest -m unit`` runs the fast tier alone; the ``>>>`` examples in the packages'
docstrings (collected by the root ``conftest.py``) are unit tests too. Real components are
never faked outside ``tests/unit``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest
from filelock import FileLock

# vLLM on CPU: a fixed KV-cache budget (start-up fails a memory check without one) and the
# engine core in-process (start-up drops from ~30 s to ~4 s at the same speed).
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

# trackio keeps its runs where TRACKIO_DIR said when it was first imported (TRL imports it):
# the tests' runs go to a folder of their own, never the user's ~/.cache/huggingface/trackio.
os.environ["TRACKIO_DIR"] = tempfile.mkdtemp(prefix="rollgym-tests-trackio-")
atexit.register(shutil.rmtree, os.environ["TRACKIO_DIR"], ignore_errors=True)

# A suite started in the background (`make test &`) inherits SIGINT ignored, and so would
# every child a test starts; the tests that Ctrl-C a child need it delivered. A handler,
# unlike an ignore, is reset to the default in a child at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

TIERS = ("unit", "docker", "engine", "e2e")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = Path(__file__).parent
    for item in items:
        path = Path(item.path)
        tier = path.relative_to(root).parts[0] if path.is_relative_to(root) else "unit"
        if tier in TIERS:
            item.add_marker(getattr(pytest.mark, tier))


@pytest.fixture(scope="session")
def default_model_dir() -> Path:
    """The default model made by the set-up (`rollgym model init`)."""
    from rollgym.contract.paths import default_model_dir

    path = default_model_dir()
    if not (path / "config.json").is_file():
        pytest.fail(f"no default model at {path}: run scripts/setup.sh (or `rollgym model init`)")
    return path


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct, pulled by the set-up (`rollgym model pull smollm2-135m-instruct`)."""
    from rollgym.contract.paths import models_dir
    from rollgym.models.catalog import CATALOG
    from rollgym.models.pull import is_pulled

    entry = CATALOG["smollm2-135m-instruct"]
    path = models_dir() / entry.name
    if not is_pulled(entry, path):
        pytest.fail(f"no {entry.name} at {path}: run scripts/setup.sh (or `rollgym model pull`)")
    return path


@pytest.fixture(scope="session")
def docker_client():  # type: ignore[no-untyped-def]
    """A client of the local Docker engine, which the set-up starts."""
    import docker

    client = docker.from_env()
    try:
        client.ping()
    except Exception as exc:  # the engine is a precondition of this tier, not a test subject
        pytest.fail(f"no Docker engine answers ({exc}): run scripts/setup.sh")
    yield client
    client.close()


@pytest.fixture(scope="session")
def remote_docker_host():  # type: ignore[no-untyped-def]
    """A second Docker engine on this machine, standing in for a remote sandbox host: its
    own socket, data root and bridge, a TLS listener that wants client certificates
    (``scripts/remote_dockerd.sh``, started here when it is not running; it keeps running,
    like the local engine)."""
    import subprocess

    from rollgym.sandboxes.config import RemoteHost

    script = Path(__file__).parents[1] / "scripts" / "remote_dockerd.sh"
    # make test's two pytest-xdist workers each run the session fixtures: one starts it
    with FileLock(Path(tempfile.gettempdir()) / f"rollgym-remote-dockerd-{os.getuid()}.lock"):
        started = subprocess.run([script, "start"], capture_output=True, text=True)
    if started.returncode != 0:
        pytest.fail(f"the remote Docker engine did not start: {started.stderr.strip()}")
    lines = subprocess.run([script, "env"], capture_output=True, text=True, check=True).stdout
    settings = dict(line.split("=", 1) for line in lines.split())
    prefix = "ROLLGYM_SANDBOXES__REMOTE__"
    return RemoteHost(url=settings[prefix + "URL"], cert_dir=settings[prefix + "CERT_DIR"])


@pytest.fixture(scope="session")
def tool_model_dir(default_model_dir: Path) -> Path:
    """The default model taught the tool-call format: 100 SFT steps on Compute's oracle play
    (every demonstration calls the python tool; no copy drills, so its operands and
    answers are mostly wrong). Of 40 first replies, 40 greedy, 31 at temperature 0.5 and
    17 at 1.0 were a valid call. Made once per machine (the warm start's marker; about
    5 minutes), for the tests whose point is tool calls made, parsed and answered."""
    from rollgym.contract.paths import models_dir
    from rollgym.run.demos import ComputeDemos
    from rollgym.run.warmstart import WarmStartConfig, warm_start

    config = WarmStartConfig(
        demos=ComputeDemos(episodes=1600, direct_share=0.0, copies=0, drills=0),
        epochs=2.0,
        learning_rate=3e-3,
        max_grad_norm=None,
    )
    target = models_dir() / "test-tool-caller"
    with FileLock(target.with_suffix(".lock")):  # one xdist worker makes it, the other finds it
        return warm_start(config, default_model_dir, target)
