"""A worker extension that fails or hangs mid-swap, for the engine tier's recovery tests.

It runs inside vLLM's engine process. The file names of an update choose the fault:
``fail-midway*`` raises after half of the tensors were loaded (the model is left half
new), ``hang*`` sleeps past any swap deadline first. Other files load normally.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rollgym.server.engine.worker_ext import RollgymWorkerExtension

HANG_S = 120.0


class FaultyWorkerExtension(RollgymWorkerExtension):
    def rollgym_tensors(
        self, files: list[str], renames: dict[str, str], skip: list[str]
    ) -> Iterator[tuple[str, Any]]:
        name = Path(files[0]).name
        if name.startswith("hang"):
            time.sleep(HANG_S)
        tensors = list(super().rollgym_tensors(files, renames, skip))
        for index, item in enumerate(tensors):
            if name.startswith("fail-midway") and index == len(tensors) // 2:
                raise RuntimeError("the worker failed mid-swap")
            yield item
