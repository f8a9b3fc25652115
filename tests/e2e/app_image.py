"""The app image of the compose test and the second Ray node's, built in the background
from the start of the session.

``scripts/setup.sh app-image`` (the wheelhouse, then an offline ``docker build``) takes
3-4 minutes on a new machine, mostly disk work: gigabytes of wheels and site-packages
written into layers. Started as soon as a test that needs it is among the collected tests,
it overlaps the tests that run before it instead of adding its time to theirs (those
tests run last); their fixtures wait for it. On a machine that built it before, the script finds the
wheelhouse and every layer cached and takes seconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_TEST = Path(__file__).with_name("test_compose_e2e.py")
# Every module that runs the image, in the order they run, at the end of the session.
IMAGE_TESTS = (Path(__file__).with_name("test_cluster_nodes_e2e.py"), COMPOSE_TEST)
# Minutes on a new machine; past this it hangs (once: waiting on a set-up lock that a
# daemon had inherited), and a hang should fail this test, not eat the whole CI run.
BUILD_TIMEOUT_S = 20 * 60
_BUILD = pytest.StashKey[tuple[subprocess.Popen[bytes], Path]]()


def start_if_needed(session: pytest.Session) -> None:
    """Start the build when a selected test needs the image."""
    if session.config.option.collectonly:
        return
    if any(Path(item.path) in IMAGE_TESTS for item in session.items):
        _start(session.config)


def wait(config: pytest.Config) -> None:
    """Block until the image is built (starting the build now if nothing started it); fail
    the test with the end of the script's output if it failed."""
    if _BUILD not in config.stash:
        _start(config)
    build, log = config.stash[_BUILD]
    try:
        code = build.wait(timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(build.pid, signal.SIGTERM)
        pytest.fail(
            f"scripts/setup.sh app-image ran past {BUILD_TIMEOUT_S} s ({log}):\n{log.read_text()[-3000:]}"
        )
    if code != 0:
        pytest.fail(f"scripts/setup.sh app-image failed ({log}):\n{log.read_text()[-3000:]}")


def _start(config: pytest.Config) -> None:
    log = Path(tempfile.mkstemp(prefix="rollgym-app-image-", suffix=".log")[1])
    with log.open("wb") as out:
        build = subprocess.Popen(
            [str(ROOT / "scripts/setup.sh"), "app-image"],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: stopped whole if the session ends first
        )
    config.stash[_BUILD] = (build, log)


def stop(config: pytest.Config) -> None:
    """End a build still running when the session ends (its test was never reached); the
    script repairs a cut-off build on its next run."""
    if _BUILD in config.stash:
        build, _ = config.stash[_BUILD]
        if build.poll() is None:
            os.killpg(build.pid, signal.SIGTERM)
            build.wait()
