"""``WarmPool``: a bounded pool of ready boxes, kept apart from the boxes themselves.

The pool starts ``size`` boxes in parallel through a ``BoxProvider`` and hands them out
as ``PooledSandbox`` leases. ``release`` resets a box for its next user, or retires it
(stops it and starts a replacement in the background) when it died, failed its reset, had
a command killed for memory, or had a command time out (``recycle_after_timeout``). A
health thread pings idle boxes and replaces those that stopped answering. A started pool
closes at the latest when its process exits, SIGTERM included (``sandboxes.exits``). ``acquire`` waits for a free box at most its
timeout (``PoolTimeout``); waiting callers are served first come, first served, sync and
async alike. Works from threads and from event loops: the async forms never block the
loop (the blocking work of starting and stopping boxes runs on the pool's threads).

    with WarmPool(provider, PoolConfig(size=4)) as pool:
        with pool.sandbox(timeout=5) as box:
            box.run_shell("echo hi")
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import enum
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from . import exits
from . import metrics as m
from .base import PoolTimeout, Sandbox, SandboxError, SandboxState, SandboxStateError
from .box import ExecutorSandbox
from .config import PoolConfig
from .lease import PooledSandbox
from .provider import BoxProvider

MAX_RETRY_BACKOFF_S = 30.0

logger = logging.getLogger(__name__)


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


class _Waiter:
    """One blocked acquire: a thread (event) or a coroutine (future on its loop)."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.loop = loop
        self.future: asyncio.Future[PooledSandbox] | None = loop.create_future() if loop else None
        self.event = threading.Event()
        self.lease: PooledSandbox | None = None
        self.error: SandboxError | None = None
        self.created = time.monotonic()  # first come, first served across kinds (ImagePool)


class WarmPool:
    def __init__(
        self,
        provider: BoxProvider,
        config: PoolConfig | None = None,
        *,
        metrics: m.MetricsSink | None = None,
    ) -> None:
        self.config = config or PoolConfig()
        self._provider = provider
        self._metrics = metrics or m.NullMetrics()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._idle: collections.deque[ExecutorSandbox] = collections.deque()
        self._leased: set[ExecutorSandbox] = set()
        self._waiters: collections.deque[_Waiter] = collections.deque()
        self._starting = 0
        self._start_failures = 0
        self._last_error = ""
        self._state = PoolState.NEW
        self._closing = threading.Event()
        self._workers = ThreadPoolExecutor(self.config.start_parallelism, "sandbox-pool")
        self._health: threading.Thread | None = None

    # -- life ---------------------------------------------------------------------------------
    def start(self, *, wait: bool = True) -> None:
        """Sweep leftovers of dead owners, then start ``size`` boxes (and wait for them)."""
        with self._lock:
            if self._state is not PoolState.NEW:
                raise SandboxStateError(f"the pool is {self._state.value}; start it once")
            self._state = PoolState.OPEN
        exits.close_at_exit(self)
        try:
            self._provider.open()
            self._provider.sweep()
            for _ in range(self.config.size):
                self._spawn()
            if wait:
                self._wait_warm()
        except BaseException:
            self.close()
            raise
        if self.config.health_interval_s > 0:
            # A daemon: a process that never closed its pool must still get to exit.
            self._health = threading.Thread(
                target=self._health_loop, name="sandbox-health", daemon=True
            )
            self._health.start()

    def _wait_warm(self) -> None:
        rounds = -(-self.config.size // self.config.start_parallelism)
        deadline = time.monotonic() + self.config.box.start_timeout_s * rounds
        with self._changed:
            while len(self._idle) + len(self._leased) < self.config.size:
                if self._start_failures:
                    raise SandboxError(f"a sandbox failed to start: {self._last_error}")
                if not self._changed.wait(deadline - time.monotonic()):
                    raise SandboxError(f"the pool did not warm up in time: {self.status()}")

    def close(self) -> None:
        """Stop every box (leased ones too) and remove what the pool left on the host."""
        with self._lock:
            if self._state is PoolState.CLOSED:
                return
            self._state = PoolState.CLOSED
            self._closing.set()
            boxes = [*self._idle, *self._leased]
            self._idle.clear()
            self._leased.clear()
            waiters, self._waiters = list(self._waiters), collections.deque()
            self._changed.notify_all()
        for waiter in waiters:
            self._fail(waiter, SandboxStateError("the pool closed while waiting for a sandbox"))
        for box in boxes:
            try:
                self._workers.submit(self._provider.stop_box, box)
            except RuntimeError:  # the interpreter is exiting: no new threads, stop it here
                self._provider.stop_box(box)
        self._workers.shutdown(wait=True)
        if self._health is not None and self._health is not threading.current_thread():
            self._health.join()
        self._provider.close()
        exits.forget(self)

    def __enter__(self) -> WarmPool:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> WarmPool:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.close)

    def status(self) -> PoolStatus:
        return PoolStatus(
            size=self.config.size,
            ready=len(self._idle),
            leased=len(self._leased),
            starting=self._starting,
            waiting=len(self._waiters),
        )

    # -- acquire --------------------------------------------------------------------------------
    def acquire(self, *, timeout: float | None = None) -> Sandbox:
        start = time.perf_counter()
        lease = self._lease_or_wait(None)
        if isinstance(lease, _Waiter):
            waiter, seconds = lease, self._acquire_timeout(timeout)
            waiter.event.wait(seconds)
            with self._lock:
                if waiter.lease is None and waiter.error is None:
                    self._waiters.remove(waiter)
                    raise PoolTimeout(self._timeout_message(seconds))
            if waiter.error is not None:
                raise waiter.error
            assert waiter.lease is not None
            lease = waiter.lease
        self._metrics.observe(m.POOL_WAIT, time.perf_counter() - start)
        return lease

    async def aacquire(self, *, timeout: float | None = None) -> Sandbox:
        start = time.perf_counter()
        lease = self._lease_or_wait(asyncio.get_running_loop())
        if isinstance(lease, _Waiter):
            lease = await self._await_lease(lease, self._acquire_timeout(timeout))
        self._metrics.observe(m.POOL_WAIT, time.perf_counter() - start)
        return lease

    async def _await_lease(self, waiter: _Waiter, seconds: float) -> PooledSandbox:
        assert waiter.future is not None
        try:
            async with asyncio.timeout(seconds):
                return await waiter.future
        except (TimeoutError, asyncio.CancelledError) as exc:
            with self._lock:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
            future = waiter.future
            if future.done() and not future.cancelled() and future.exception() is None:
                await self.arelease(future.result())  # handed over just as we gave up
            if isinstance(exc, TimeoutError):
                raise PoolTimeout(self._timeout_message(seconds)) from None
            raise

    def _lease_or_wait(self, loop: asyncio.AbstractEventLoop | None) -> PooledSandbox | _Waiter:
        """A lease on an idle box, or else a waiter queued for the next free one."""
        with self._lock:
            if self._state is PoolState.NEW:
                raise SandboxStateError("the pool is not started: call start() or use `with`")
            if self._state is PoolState.CLOSED:
                raise SandboxStateError("the pool is closed")
            if self._idle:
                box = self._idle.popleft()
                self._leased.add(box)
                return PooledSandbox(box, self)
            waiter = _Waiter(loop)
            self._waiters.append(waiter)
            return waiter

    def _acquire_timeout(self, timeout: float | None) -> float:
        return self.config.acquire_timeout_s if timeout is None else timeout

    def _timeout_message(self, seconds: float) -> str:
        message = f"no sandbox became free within {seconds} s ({self.status()})"
        return f"{message}; last start failure: {self._last_error}" if self._last_error else message

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

    # -- release ------------------------------------------------------------------------------
    def release(self, sandbox: Sandbox) -> None:
        """Reset the box for its next user, or retire it. Never raises for a box's failure."""
        box = self._take_back(sandbox)
        if box is None:
            return
        reason = self._retire_reason(box)
        if reason is None:
            try:
                box.reset()
            except SandboxError as exc:
                reason = box.death_reason or f"reset failed: {exc}"
        self._recycle(box, reason) if reason else self._put_ready(box)

    async def arelease(self, sandbox: Sandbox) -> None:
        box = self._take_back(sandbox)
        if box is None:
            return
        reason = self._retire_reason(box)
        if reason is None:
            try:
                await box.areset()
            except SandboxError as exc:
                reason = box.death_reason or f"reset failed: {exc}"
        self._recycle(box, reason) if reason else self._put_ready(box)

    def _take_back(self, sandbox: Sandbox) -> ExecutorSandbox | None:
        if not isinstance(sandbox, PooledSandbox) or sandbox.owner is not self:
            raise SandboxStateError(f"{sandbox!r} was not acquired from this pool")
        box = sandbox.detach()
        with self._lock:
            if self._state is PoolState.CLOSED:
                return None  # close() stopped it already
            self._leased.discard(box)
        return box

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

    # -- boxes coming and going -----------------------------------------------------------------
    def _put_ready(self, box: ExecutorSandbox) -> None:
        """Hand ``box`` to the first waiter, or park it idle (stop it if the pool closed)."""
        with self._lock:
            if self._state is PoolState.OPEN:
                while self._waiters:
                    waiter = self._waiters.popleft()
                    if self._hand_over(waiter, box):
                        return
                self._idle.append(box)
                self._changed.notify_all()
                return
        self._provider.stop_box(box)

    def _hand_over(self, waiter: _Waiter, box: ExecutorSandbox) -> bool:
        """Give ``box`` to ``waiter`` (lock held); False if the waiter already left."""
        lease = PooledSandbox(box, self)
        if waiter.loop is None:
            waiter.lease = lease
            waiter.event.set()
        else:
            assert waiter.future is not None
            if waiter.future.done() or waiter.loop.is_closed():
                return False
            waiter.loop.call_soon_threadsafe(self._resolve, waiter.future, lease)
        self._leased.add(box)
        return True

    def _resolve(self, future: asyncio.Future[PooledSandbox], lease: PooledSandbox) -> None:
        if future.done():  # cancelled between hand-over and now: the box goes back
            box = self._take_back(lease)
            if box is not None:
                self._put_ready(box)
        else:
            future.set_result(lease)

    def _fail(self, waiter: _Waiter, error: SandboxError) -> None:
        if waiter.loop is None:
            waiter.error = error
            waiter.event.set()
        elif waiter.future is not None and not waiter.loop.is_closed():
            waiter.loop.call_soon_threadsafe(_set_exception, waiter.future, error)

    def _recycle(self, box: ExecutorSandbox, reason: str) -> None:
        """Stop ``box`` and start a replacement, both on the pool's threads."""
        logger.info("retiring sandbox %s (%s)", box.id, reason)
        self._metrics.increment(m.REPLACEMENTS)
        self._spawn(replacing=box)

    def _spawn(self, replacing: ExecutorSandbox | None = None) -> None:
        with self._lock:
            if self._state is PoolState.OPEN:
                self._starting += 1
                self._workers.submit(self._start_job, replacing)
                return
        if replacing is not None:
            self._provider.stop_box(replacing)

    def _start_job(self, replacing: ExecutorSandbox | None) -> None:
        if replacing is not None:
            self._provider.stop_box(replacing)
        box: ExecutorSandbox | None = None
        if not self._closing.is_set():
            start = time.perf_counter()
            try:
                box = self._provider.start_box()
                self._metrics.observe(m.COLD_START, time.perf_counter() - start)
            except SandboxError as exc:
                self._metrics.increment(m.DEATHS, {"reason": "start_failed"})
                self._last_error = str(exc)
                logger.warning("a sandbox failed to start: %s", exc)
        with self._changed:
            self._starting -= 1
            if box is None:
                self._start_failures += 1
            self._changed.notify_all()
        if box is not None:
            self._put_ready(box)
        elif not self._closing.wait(min(MAX_RETRY_BACKOFF_S, 2.0**self._start_failures)):
            self._spawn()

    def _health_loop(self) -> None:
        while not self._closing.wait(self.config.health_interval_s):
            with self._lock:
                idle = list(self._idle)
            for box in idle:
                with self._lock:
                    if box not in self._idle:
                        continue
                    self._idle.remove(box)
                try:
                    box.ping()
                except SandboxError:
                    self._recycle(box, box.death_reason or "unresponsive")
                    continue
                self._put_ready(box)


def _set_exception(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
