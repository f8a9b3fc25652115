"""Pools end with the process that made them: at interpreter exit, and on SIGTERM.

A user's script that made a sandboxed env and never called ``env.close()`` must still
exit when it is done, and leave no box running; so must one stopped with SIGTERM or
Ctrl-C. So every started pool is registered here until it closes: at interpreter exit
(``atexit``) the ones still open are closed, and SIGTERM (whose default action would end
the process without any of that) becomes a normal exit, ``SystemExit(143)``, but only
where nobody has set a SIGTERM handler of their own (a server's, for one): a library
does not take a signal that is spoken for. SIGINT already is a normal exit
(``KeyboardInterrupt``). A process killed with SIGKILL gets no say: its boxes end
themselves once no host has been connected for their grace (``orphan_grace_s``).
"""

from __future__ import annotations

import atexit
import signal
import threading
from types import FrameType
from typing import Protocol


class Closable(Protocol):
    def close(self) -> None: ...


_open: dict[int, Closable] = {}
_lock = threading.Lock()
_at_exit = False
_on_sigterm = False


def close_at_exit(pool: Closable) -> None:
    """Close ``pool`` when the process exits, if it is still open then."""
    global _at_exit
    with _lock:
        _open[id(pool)] = pool
        if not _at_exit:
            atexit.register(close_all)
            _at_exit = True
    _exit_on_sigterm()


def forget(pool: Closable) -> None:
    """``pool`` closed by itself: nothing to do for it at exit."""
    with _lock:
        _open.pop(id(pool), None)


def close_all() -> None:
    with _lock:
        pools = list(_open.values())
    for pool in pools:
        pool.close()


def _exit_on_sigterm() -> None:
    """Make SIGTERM a normal exit, from the main thread and only if nobody else took it."""
    global _on_sigterm
    if _on_sigterm or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminate)
    _on_sigterm = True


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)
