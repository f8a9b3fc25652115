"""Pushes that overlap training: one upload at a time in a worker thread, in version order.

With ``TrainerConfig.background_push`` a step ends by handing its weights to the worker
(``submit``) and the next step starts at once; the upload, the server's load and swap and
the canary run meanwhile. What keeps it sound:

* **version order**: one worker, one push in flight; ``submit`` first waits for the
  previous push, so the server never gets version v + 1 before v, and at most one snapshot
  of the weights is held;
* **the snapshot**: the tensors training will change are copied before the next step
  (a LoRA run copies nothing: its merged tensors are new and the base is frozen);
* **waiting only where the weights must be served**: a checkpoint (it records the
  version its weights have), an online evaluation, the guard's rollback and the end of
  training call ``wait``. The trainer's version for the staleness window is the one its
  weights will have (``trainer_version``), so a pending push never widens the window.

A failed push raises its error at the next ``submit`` or ``wait``. ``waited_s`` is how long
the last ``submit`` blocked on the push before it (0 when training outlasts a push).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from rollgym.trainer.weights import WeightPusher, WeightSync


class BackgroundPush:
    """See the module docstring. ``close`` stops the worker (after the push in flight)."""

    def __init__(
        self, pusher: WeightPusher, on_landed: Callable[[WeightSync], object] | None = None
    ) -> None:
        """``on_landed`` gets each push's sync once ``wait`` saw it land (the main thread)."""
        self.pusher = pusher
        self.on_landed = on_landed
        self.waited_s = 0.0
        self._target = pusher.version
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rollgym-push")
        self._pending: Future[WeightSync] | None = None

    def close(self) -> None:
        self._worker.shutdown(wait=True)

    @property
    def trainer_version(self) -> int:
        """The version of the trainer's current weights: the last pushed, or the one a
        pending push will get."""
        return max(self.pusher.version, self._target)

    def submit(self, model: Any) -> WeightSync | None:
        """Wait for the previous push (its sync, None if none), then push ``model``'s
        weights in the background; ``waited_s`` says how long the wait took."""
        started = time.perf_counter()
        previous = self.wait()
        self.waited_s = time.perf_counter() - started
        prepared = self.pusher.prepare(model, snapshot=True)
        self._target = self.pusher.version + 1
        self._pending = self._worker.submit(self.pusher.send, prepared)
        return previous

    def wait(self) -> WeightSync | None:
        """The pending push's sync once it landed (its error, if it failed); None if none."""
        pending, self._pending = self._pending, None
        if pending is None:
            return None
        sync = pending.result()
        if self.on_landed is not None:
            self.on_landed(sync)
        return sync
