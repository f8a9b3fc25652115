"""Debian's chromium, headless, for the dashboard's browser tests (no test in this module).

Every run gets a fresh profile and no network beyond the page's own server: background
networking, component updates, sync and QUIC are off, so nothing outside loopback is
contacted. ``--virtual-time-budget`` lets the page's timers and fetches run to a fixed
amount of virtual time before the DOM is dumped or the screenshot taken.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

FLAGS = (
    "--headless",
    "--no-sandbox",  # we run as root in CI
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def run(url: str, *extra: str, budget_ms: int = 8000, timeout_s: float = 120.0) -> str:
    """Load ``url`` with ``extra`` flags (``--dump-dom``, ``--screenshot=...``); stdout."""
    chromium = binary()
    if chromium is None:
        raise RuntimeError("no chromium: run scripts/setup.sh (it installs Debian's chromium)")
    with tempfile.TemporaryDirectory(prefix="rollgym-chromium-") as profile:
        command = [
            chromium,
            *FLAGS,
            f"--user-data-dir={profile}",
            f"--virtual-time-budget={budget_ms}",
            *extra,
            url,
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise RuntimeError(f"chromium exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


def dump_dom(url: str, **kwargs: float) -> str:
    return run(url, "--dump-dom", **kwargs)  # type: ignore[arg-type]


def screenshot(url: str, out: Path, *, size: tuple[int, int] = (1400, 1250)) -> Path:
    run(url, f"--screenshot={out}", f"--window-size={size[0]},{size[1]}")
    if not out.is_file():
        raise RuntimeError(f"chromium wrote no screenshot to {out}")
    return out
