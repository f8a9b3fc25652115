"""A worker extension that fails, hangs or dawdles mid-update, for the engine tier's tests.

It runs inside vLLM's engine process. The file names of an update choose the fault:
``fail-midway*`` raises after half of the tensors were read (a staged update fails while
loading, the live model untouched; one reloaded in place is left half new), ``fail-swap*``
raises in the swap after half of the staged modules were handed over, ``hang*`` sleeps
past any swap deadline first, ``slow*`` sleeps ``SLOW_S`` before loading. Other files load
normally.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rollgym.engine.vllm.worker_ext import RollgymWorkerExtension

HANG_S = 120.0
SLOW_S = 3.0


class FaultyWorkerExtension(RollgymWorkerExtension):
    _rollgym_swapping: str = ""

    def rollgym_tensors(
        self, files: list[str], renames: dict[str, str], skip: list[str]
    ) -> Iterator[tuple[str, Any]]:
        name = Path(files[0]).name
        self._rollgym_swapping = name
        if name.startswith("hang"):
            time.sleep(HANG_S)
        if name.startswith("slow"):
            time.sleep(SLOW_S)
        tensors = list(super().rollgym_tensors(files, renames, skip))
        for index, item in enumerate(tensors):
            if name.startswith("fail-midway") and index == len(tensors) // 2:
                raise RuntimeError("the worker failed mid-swap")
            yield item

    def rollgym_swap_staged(self) -> int:
        future = self._rollgym_staging
        if future is None or not self._rollgym_swapping.startswith("fail-swap"):
            return super().rollgym_swap_staged()
        self._rollgym_staging = None
        staged = future.result()
        staged.pairs = staged.pairs[: len(staged.pairs) // 2]
        staged.swap()
        raise RuntimeError("the worker failed mid-swap")
