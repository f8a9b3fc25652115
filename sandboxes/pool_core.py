"""What ``WarmPool`` and ``ImagePool`` share: a pool's life, a blocked acquire, a release.

The two pools keep their boxes differently (one kind, or many kinds under one cap) but
open, wait and take boxes back the same way; that part is written once here:

- ``PoolState``: ``NEW -> OPEN -> CLOSED``, checked on every call. ``start`` opens the
  pool once, warms it up and starts the health thread; ``with``/``async with`` start and
  close it; a started pool closes at exit at the latest (``sandboxes.exits``).
- ``Waiter``: one blocked acquire, a thread's event or a coroutine's future, served in
  the order it came. It gives up after its timeout (``PoolTimeout``) and leaves its
  queue; a box handed over just as it gave up goes back to the pool.
- ``release``'s rule: a box goes back reset, or is retired with its reason: dead, a
  failed reset, a command killed for memory, or (``recycle_after_timeout``) a command
  that timed out.
"""

from __future__ import annotations

import abc
import asyncio
import collections
import contextlib
import dataclasses
import enum
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Self

from . import exits
from . import metrics as m
from .base import PoolTimeout, Sandbox, SandboxError, SandboxState, SandboxStateError
from .box import ExecutorSandbox
from .config import ImagePoolConfig, PoolConfig
from .lease import PooledSandbox


class PoolState(enum.Enum):
    NEW = "new"
    OPEN = "open"
    CLOSED = "closed"


@dataclasses.dataclass(frozen=True)
class PoolStatus:
    size: int
    ready: int
    leased: int
    starting: int
    waiting: int


class Waiter:
    """One blocked acquire: a thread (event) or a coroutine (future on its loop)."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.loop = loop
        self.future: asyncio.Future[PooledSandbox] | None = loop.create_future() if loop else None
        self.event = threading.Event()
        self.lease: PooledSandbox | None = None
        self.error: SandboxError | None = None
        self.created = time.monotonic()  # first come, first served across kinds (ImagePool)

    def gone(self) -> bool:
        """A coroutine that stopped waiting (timed out, cancelled, its loop closed)."""
        return (
            self.loop is not None
            and self.future is not None
            and (self.future.done() or self.loop.is_closed())
        )

    def serve(
        self,
        lease: PooledSandbox,
        resolve: Callable[[asyncio.Future[PooledSandbox], PooledSandbox], None],
    ) -> None:
        """Wake the thread with ``lease``, or have ``resolve`` give it to the future on
        the future's own loop (``resolve`` puts it back if the future is done by then)."""
        if self.loop is None:
            self.lease = lease
            self.event.set()
        else:
            assert self.future is not None
            self.loop.call_soon_threadsafe(resolve, self.future, lease)

    def fail(self, error: SandboxError) -> None:
        if self.loop is None:
            self.error = error
            self.event.set()
        elif self.future is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(_set_exception, self.future, error)


class Leases(abc.ABC):
    """``sandbox``/``asandbox`` from ``acquire``/``release``: a lease that always ends."""

    @abc.abstractmethod
    def acquire(self, *, timeout: float | None = None) -> Sandbox: ...

    @abc.abstractmethod
    def release(self, sandbox: Sandbox) -> None: ...

    @abc.abstractmethod
    async def aacquire(self, *, timeout: float | None = None) -> Sandbox: ...

    @abc.abstractmethod
    async def arelease(self, sandbox: Sandbox) -> None: ...

    @contextlib.contextmanager
    def sandbox(self, *, timeout: float | None = None) -> Iterator[Sandbox]:
        box = self.acquire(timeout=timeout)
        try:
            yield box
        finally:
            self.release(box)

    @contextlib.asynccontextmanager
    async def asandbox(self, *, timeout: float | None = None) -> AsyncIterator[Sandbox]:
        box = await self.aacquire(timeout=timeout)
        try:
            yield box
        finally:
            await self.arelease(box)


class PoolCore(Leases):
    """A pool's shared life. A subclass sets ``config``, calls ``__init__`` for the rest
    and says how it warms up (``_warm_up``, ``_wait_warm``), checks its idle boxes
    (``_health_loop``), reports (``status``) and closes."""

    config: PoolConfig | ImagePoolConfig
    _health_name: str  # the health thread's name

    def __init__(self, metrics: m.MetricsSink | None) -> None:
        self._metrics = metrics or m.NullMetrics()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._state = PoolState.NEW
        self._closing = threading.Event()
        self._last_error = ""
        self._health: threading.Thread | None = None

    @abc.abstractmethod
    def _warm_up(self) -> None: ...

    @abc.abstractmethod
    def _wait_warm(self) -> None: ...

    @abc.abstractmethod
    def _health_loop(self) -> None: ...

    @abc.abstractmethod
    def status(self) -> PoolStatus: ...

    @abc.abstractmethod
    def close(self) -> None: ...

    # -- life ---------------------------------------------------------------------------------
    def start(self, *, wait: bool = True) -> None:
        """Sweep leftovers of dead owners, then start the warm boxes (and wait for them)."""
        with self._lock:
            if self._state is not PoolState.NEW:
                raise SandboxStateError(f"the pool is {self._state.value}; start it once")
            self._state = PoolState.OPEN
        exits.close_at_exit(self)
        try:
            self._warm_up()
            if wait:
                self._wait_warm()
        except BaseException:
            self.close()
            raise
        if self.config.health_interval_s > 0:
            # A daemon: a process that never closed its pool must still get to exit.
            self._health = threading.Thread(
                target=self._health_loop, name=self._health_name, daemon=True
            )
            self._health.start()

    def _wait_until(
        self, warm: Callable[[], int], want: int, start_timeout_s: float, failed: Callable[[], bool]
    ) -> None:
        """Wait until ``warm()`` boxes reach ``want``: ``start_timeout_s`` for each round of
        ``start_parallelism`` starts; a ``failed()`` start ends the wait."""
        rounds = -(-want // self.config.start_parallelism)
        deadline = time.monotonic() + start_timeout_s * max(1, rounds)
        with self._changed:
            while warm() < want:
                if failed():
                    raise SandboxError(f"a sandbox failed to start: {self._last_error}")
                if not self._changed.wait(deadline - time.monotonic()):
                    break
            else:
                return
        # status() outside the lock: ImagePool's takes it, and it is not reentrant
        raise SandboxError(f"the pool did not warm up in time: {self.status()}")

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.close)

    # -- acquire ------------------------------------------------------------------------------
    def _check_open_locked(self) -> None:
        if self._state is PoolState.NEW:
            raise SandboxStateError("the pool is not started: call start() or use `with`")
        if self._state is PoolState.CLOSED:
            raise SandboxStateError("the pool is closed")

    def _timeout(self, timeout: float | None) -> float:
        return self.config.acquire_timeout_s if timeout is None else timeout

    def _timeout_message(self, seconds: float, image: str | None) -> str:
        of = "" if image is None else f" of {image}"
        message = f"no sandbox{of} became free within {seconds} s ({self.status()})"
        return f"{message}; last start failure: {self._last_error}" if self._last_error else message

    def _wait(
        self, waiter: Waiter, queue: collections.deque[Waiter], seconds: float, image: str | None
    ) -> PooledSandbox:
        """The thread's lease once served; ``PoolTimeout`` (out of ``queue``) if not in time."""
        waiter.event.wait(seconds)
        with self._lock:
            gave_up = waiter.lease is None and waiter.error is None
            if gave_up:
                queue.remove(waiter)
        if gave_up:
            raise PoolTimeout(self._timeout_message(seconds, image))
        if waiter.error is not None:
            raise waiter.error
        assert waiter.lease is not None
        return waiter.lease

    async def _await(
        self, waiter: Waiter, queue: collections.deque[Waiter], seconds: float, image: str | None
    ) -> PooledSandbox:
        """``_wait`` for a coroutine; cancelled, it leaves ``queue`` too."""
        assert waiter.future is not None
        try:
            async with asyncio.timeout(seconds):
                return await waiter.future
        except (TimeoutError, asyncio.CancelledError) as exc:
            with self._lock:
                if waiter in queue:
                    queue.remove(waiter)
            future = waiter.future
            if future.done() and not future.cancelled() and future.exception() is None:
                await self.arelease(future.result())  # handed over just as we gave up
            if isinstance(exc, TimeoutError):
                raise PoolTimeout(self._timeout_message(seconds, image)) from None
            raise

    # -- release ------------------------------------------------------------------------------
    def _reset_or_reason(self, box: ExecutorSandbox) -> str | None:
        """Reset a box taken back; None when it is fit for its next user, else why not."""
        reason = self._retire_reason(box)
        if reason is None:
            try:
                box.reset()
            except SandboxError as exc:
                reason = box.death_reason or f"reset failed: {exc}"
        return reason

    async def _areset_or_reason(self, box: ExecutorSandbox) -> str | None:
        reason = self._retire_reason(box)
        if reason is None:
            try:
                await box.areset()
            except SandboxError as exc:
                reason = box.death_reason or f"reset failed: {exc}"
        return reason

    def _retire_reason(self, box: ExecutorSandbox) -> str | None:
        if box.state is SandboxState.DEAD:
            return box.death_reason or "dead"
        if box.oom_kills:  # its memory was full once: a fresh box is the safe next one
            self._metrics.increment(m.RECYCLED, {"reason": "oom"})
            return "oom"
        if box.timeouts and self.config.recycle_after_timeout:
            self._metrics.increment(m.RECYCLED, {"reason": "timeout"})
            return "timeout"
        return None

    # -- boxes coming ---------------------------------------------------------------------------
    def _start_box(
        self, start_box: Callable[[], ExecutorSandbox], log: logging.Logger, what: str
    ) -> ExecutorSandbox | SandboxError:
        """A started box (its start timed), or the error that stopped it (counted, logged)."""
        start = time.perf_counter()
        try:
            box = start_box()
        except SandboxError as exc:
            self._metrics.increment(m.DEATHS, {"reason": "start_failed"})
            log.warning("%s failed to start: %s", what, exc)
            return exc
        self._metrics.observe(m.COLD_START, time.perf_counter() - start)
        return box


def _set_exception(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
