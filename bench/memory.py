"""Peak resident memory of this process and its children, sampled while a block runs.

    with PeakRss() as peak:
        train()                      # the rollout server is a child of this process
    peak.mib                         # the largest sum of RSS seen, in MiB

``ru_maxrss`` gives one process's peak over its whole life (and the children's largest,
not their sum); a benchmark that measures several runs in turn needs the peak of the sum
during each. Containers are not children (the Docker engine starts them) and are not
counted.
"""

from __future__ import annotations

import contextlib
import threading

import psutil


def tree_rss(process: psutil.Process) -> int:
    """Bytes resident in ``process`` and every descendant still alive."""
    total = 0
    for member in (process, *process.children(recursive=True)):
        with contextlib.suppress(psutil.Error):
            total += member.memory_info().rss
    return total


class PeakRss:
    """Samples ``tree_rss`` of this process every ``interval_s`` inside a ``with`` block."""

    def __init__(self, interval_s: float = 0.2) -> None:
        self.interval_s = interval_s
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="peak-rss", daemon=True)

    @property
    def mib(self) -> float:
        return self.peak_bytes / 2**20

    def _sample(self) -> None:
        me = psutil.Process()
        while True:
            self.peak_bytes = max(self.peak_bytes, tree_rss(me))
            if self._stop.wait(self.interval_s):
                return

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
