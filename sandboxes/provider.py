"""The seam between a pool and the boxes' lives: start one, stop one, sweep leftovers.

A provider owns the *life* of a box (a Docker container, or a host process for the
fake); the ``ExecutorSandbox`` it returns is what runs *in* the box. Providers block
(the pool calls them from its worker threads) and raise only ``SandboxError``s.
"""

from __future__ import annotations

from typing import Protocol

from .box import ExecutorSandbox


class BoxProvider(Protocol):
    def open(self) -> None:
        """Connect and prepare (host folders, engine); the pool calls it once, first."""
        ...

    def start_box(self) -> ExecutorSandbox:
        """Create and start a box, and return it once its executor answers."""
        ...

    def stop_box(self, box: ExecutorSandbox) -> None:
        """Stop and remove a box and everything it left on the host. Never raises."""
        ...

    def sweep(self) -> int:
        """Remove leftovers of owners that died without closing; return how many."""
        ...

    def close(self) -> None:
        """Remove whatever this provider still owns. Never raises."""
        ...
