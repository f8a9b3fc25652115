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
import math
import threading
import time

import psutil


def members(process: psutil.Process) -> list[psutil.Process]:
    """``process`` and every descendant alive now."""
    with contextlib.suppress(psutil.Error):
        return [process, *process.children(recursive=True)]
    return [process]


def total_rss(processes: list[psutil.Process]) -> int:
    """Bytes resident in those of ``processes`` still alive."""
    total = 0
    for member in processes:
        with contextlib.suppress(psutil.Error):
            total += member.memory_info().rss
    return total


class PeakRss:
    """Samples the RSS of this process and its descendants every ``interval_s`` inside a
    ``with`` block, finding the descendants anew every ``tree_every_s``.

    Finding them reads every process of the machine (``children(recursive=True)``): done at
    each sample, next to a sandbox pool that starts a program per tool call, it took a tenth
    of a core and the GIL from the process being measured (py-spy, bench.peers' trainer).
    So a descendant that lives less than ``tree_every_s`` may go uncounted.
    """

    def __init__(self, interval_s: float = 0.2, tree_every_s: float = 2.0) -> None:
        self.interval_s = interval_s
        self.tree_every_s = tree_every_s
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="peak-rss", daemon=True)

    @property
    def mib(self) -> float:
        return self.peak_bytes / 2**20

    def _sample(self) -> None:
        me, found_at, tree = psutil.Process(), -math.inf, []
        while True:
            if time.monotonic() - found_at >= self.tree_every_s:
                found_at, tree = time.monotonic(), members(me)
            self.peak_bytes = max(self.peak_bytes, total_rss(tree))
            if self._stop.wait(self.interval_s):
                return

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
