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
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from . import exits
from . import metrics as m
from .base import Sandbox, SandboxError, SandboxStateError
from .box import ExecutorSandbox
from .config import PoolConfig
from .lease import PooledSandbox
from .pool_core import PoolCore, PoolState, PoolStatus, Waiter
from .provider import BoxProvider

MAX_RETRY_BACKOFF_S = 30.0

logger = logging.getLogger(__name__)


class WarmPool(PoolCore):
    """See the module docstring; the life, waiting and release rules are ``PoolCore``'s."""

    config: PoolConfig
    _health_name = "sandbox-health"

    def __init__(
        self,
        provider: BoxProvider,
        config: PoolConfig | None = None,
        *,
        metrics: m.MetricsSink | None = None,
    ) -> None:
        self.config = config or PoolConfig()
        super().__init__(metrics)
        self._provider = provider
        self._idle: collections.deque[ExecutorSandbox] = collections.deque()
        self._leased: set[ExecutorSandbox] = set()
        self._waiters: collections.deque[Waiter] = collections.deque()
        self._starting = 0
        self._start_failures = 0
        self._workers = ThreadPoolExecutor(self.config.start_parallelism, "sandbox-pool")

    # -- life ---------------------------------------------------------------------------------
    def _warm_up(self) -> None:
        """Start ``size`` boxes (``start``'s part)."""
        self._provider.open()
        self._provider.sweep()
        for _ in range(self.config.size):
            self._spawn()

    def _wait_warm(self) -> None:
        self._wait_until(
            lambda: len(self._idle) + len(self._leased),
            self.config.size,
            self.config.box.start_timeout_s,
            lambda: self._start_failures > 0,
        )

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
            waiter.fail(SandboxStateError("the pool closed while waiting for a sandbox"))
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
        if isinstance(lease, Waiter):
            lease = self._wait(lease, self._waiters, self._timeout(timeout), None)
        self._metrics.observe(m.POOL_WAIT, time.perf_counter() - start)
        return lease

    async def aacquire(self, *, timeout: float | None = None) -> Sandbox:
        start = time.perf_counter()
        lease = self._lease_or_wait(asyncio.get_running_loop())
        if isinstance(lease, Waiter):
            lease = await self._await(lease, self._waiters, self._timeout(timeout), None)
        self._metrics.observe(m.POOL_WAIT, time.perf_counter() - start)
        return lease

    def _lease_or_wait(self, loop: asyncio.AbstractEventLoop | None) -> PooledSandbox | Waiter:
        """A lease on an idle box, or else a waiter queued for the next free one."""
        with self._lock:
            self._check_open_locked()
            if self._idle:
                box = self._idle.popleft()
                self._leased.add(box)
                return PooledSandbox(box, self)
            waiter = Waiter(loop)
            self._waiters.append(waiter)
            return waiter

    # -- release ------------------------------------------------------------------------------
    def release(self, sandbox: Sandbox) -> None:
        """Reset the box for its next user, or retire it. Never raises for a box's failure."""
        box = self._take_back(sandbox)
        if box is None:
            return
        reason = self._reset_or_reason(box)
        self._recycle(box, reason) if reason else self._put_ready(box)

    async def arelease(self, sandbox: Sandbox) -> None:
        box = self._take_back(sandbox)
        if box is None:
            return
        reason = await self._areset_or_reason(box)
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

    def _hand_over(self, waiter: Waiter, box: ExecutorSandbox) -> bool:
        """Give ``box`` to ``waiter`` (lock held); False if the waiter already left."""
        if waiter.gone():
            return False
        waiter.serve(PooledSandbox(box, self), self._resolve)
        self._leased.add(box)
        return True

    def _resolve(self, future: asyncio.Future[PooledSandbox], lease: PooledSandbox) -> None:
        if future.done():  # cancelled between hand-over and now: the box goes back
            box = self._take_back(lease)
            if box is not None:
                self._put_ready(box)
        else:
            future.set_result(lease)

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
            started = self._start_box(self._provider.start_box, logger, "a sandbox")
            if isinstance(started, SandboxError):
                self._last_error = str(started)
            else:
                box = started
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
