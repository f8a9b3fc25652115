"""The trainer's process on tcmalloc instead of glibc's malloc: less memory held, no slower.

A training step frees and allocates the same few-megabyte tensors (activations, the LM
head's tiles, gradients) again and again. Once one large block is freed, glibc's malloc
serves blocks of that size from its heap instead of fresh pages, and its heap cannot
shrink while a live block sits above the freed ones. On tcmalloc a SmolLM2 LoRA trainer's
peak fell from 2023 to 1316 MiB and full fine-tuning's from 3123 to 2822, its steps no
slower (one probe run each; glibc with a fixed mmap threshold gave the memory back with
steps 40-55% slower; docs/benchmarks.md, ``bench.lora``).

The allocator cannot be swapped in a running process: the loader has to preload it
(``LD_PRELOAD``) before anything allocates. So ``rollgym run`` and ``rollgym train``, started
from a command line, start themselves again, once, with Debian's ``libtcmalloc-minimal4``
preloaded when the machine has it (``scripts/setup.sh`` installs it, the app image has it),
as vLLM's CPU backend does for its engine processes. Same process id, same arguments; the
restarted process puts ``LD_PRELOAD`` back as it was, so its children (the rollout server,
its engine, docker) start as before. ``ROLLGYM_MALLOC=system`` keeps glibc's malloc.
"""

from __future__ import annotations

import ctypes.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path

LIBRARY = "tcmalloc_minimal"  # Debian's libtcmalloc-minimal4 (gperftools without profiler)
CHOICE = "ROLLGYM_MALLOC"  # "system": glibc's malloc, no restart
RESTARTED = "ROLLGYM_LD_PRELOAD_BEFORE"  # set in the restarted process: LD_PRELOAD as it was
QUIET_LARGE_ALLOCS = {"TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD": str(1 << 40)}  # no 1 GiB notes


def library_name() -> str | None:
    """The loader's name of tcmalloc on this machine (``libtcmalloc_minimal.so.4``), or None."""
    return ctypes.util.find_library(LIBRARY) if sys.platform == "linux" else None


def on_tcmalloc() -> bool:
    """Whether tcmalloc is mapped into this process."""
    maps = Path("/proc/self/maps")
    return maps.exists() and "libtcmalloc" in maps.read_text()


def restart_environment(environ: Mapping[str, str], library: str | None) -> dict[str, str] | None:
    """The environment to start this process again on ``library``; None where it should not:
    no library, ``ROLLGYM_MALLOC=system``, or already restarted once.

    >>> restart_environment({"LD_PRELOAD": "a.so"}, "libtcmalloc_minimal.so.4")["LD_PRELOAD"]
    'libtcmalloc_minimal.so.4:a.so'
    >>> restart_environment({"ROLLGYM_MALLOC": "system"}, "libtcmalloc_minimal.so.4") is None
    True
    """
    if library is None or environ.get(CHOICE) == "system" or RESTARTED in environ:
        return None
    before = environ.get("LD_PRELOAD", "")
    preload = ":".join(name for name in (library, before) if name)
    return {**QUIET_LARGE_ALLOCS, **environ, "LD_PRELOAD": preload, RESTARTED: before}


def restart_on_tcmalloc() -> None:
    """Replace this process by itself on tcmalloc (same interpreter, arguments and id) where
    it is not on it yet and the machine has it; in the restarted process, put ``LD_PRELOAD``
    back for its children and return. Call it first thing in a command's own process, never
    in a caller's (a test calling ``rollgym.cli.main``): it does not return there."""
    if RESTARTED in os.environ:  # the second start: tcmalloc is preloaded (or ld.so refused it)
        before = os.environ.pop(RESTARTED)
        if before:
            os.environ["LD_PRELOAD"] = before
        else:
            os.environ.pop("LD_PRELOAD", None)
        return
    if on_tcmalloc():
        return
    environ = restart_environment(os.environ, library_name())
    if environ is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, environ)
