"""``ImagePool``: warm boxes of many images under one cap, for tasks that bring their own.

A folder of Harbor tasks is a folder of images: one per task. ``ImagePool`` keeps warm
boxes per *box kind* (a ``SandboxConfig``: its image and its limits) under global caps,
and hands each kind out through a view that is an ordinary ``SandboxPool``::

    with DockerImagePool(ImagePoolConfig(max_boxes=16)) as pool:
        tasks = pool.for_box(SandboxConfig(image="rollgym/task-fix-config:3f2a..."))
        with tasks.sandbox() as box:          # warm if one of this kind was idle
            box.run_shell("ls")

- **Fast when warm.** An acquire of a kind with an idle box takes it under one lock (the
  most recently used first: the warmest); no I/O on that path.
- **Caps.** Every box counts against ``max_boxes`` (idle, leased, starting or stopping)
  and its ``memory_mb`` against ``max_memory_mb``. A kind with nothing idle starts a box
  (a *cold start*, counted and timed apart) if the caps allow; if not, the least recently
  used idle box of another kind is stopped first (an *eviction*); if every box is leased,
  the acquire waits for a release, first come first served across kinds.
- **Warm count follows demand.** A kind keeps as many boxes as it had leased at once
  within ``demand_window_s`` (``sandboxes.demand``); the health pass stops idle boxes
  beyond that, and replaces retired ones up to it. The default kind (``config.box``) keeps
  at least ``warm_default``.
- **The same guarantees as ``WarmPool``.** ``release`` resets a box for its next user, or
  retires it (dead, failed reset, an OOM kill, a command that timed out); the health pass
  pings idle boxes and retires those that stopped answering; a started pool closes at
  exit. A kind whose box cannot start (its image is missing) fails the acquire that
  asked for it with that error at once, instead of retrying in the background.

``acquire()`` without a view serves the default kind, so an ``ImagePool`` is a drop-in
``SandboxPool`` for envs of one image too. Metrics (``sandboxes.metrics``): warm hits,
cold starts and evictions per image, acquire time per image and path (warm or cold),
besides the pool's usual ones.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from . import exits
from . import metrics as m
from .base import Sandbox, SandboxError, SandboxStateError
from .box import ExecutorSandbox
from .config import ImagePoolConfig, PoolConfig, SandboxConfig
from .demand import Demand
from .lease import PooledSandbox
from .pool_core import Leases, PoolCore, PoolState, PoolStatus, Waiter
from .provider import BoxProvider

logger = logging.getLogger(__name__)

ProviderFactory = Callable[[PoolConfig], BoxProvider]


@dataclasses.dataclass(frozen=True)
class KindStatus:
    """One kind of box now: its boxes by state, its demand target, its counters."""

    image: str
    ready: int
    leased: int
    starting: int
    waiting: int
    target: int
    warm_hits: int
    cold_starts: int
    evictions: int


class _Kind:
    """The boxes of one ``SandboxConfig`` (lock held for every field but ``provider``)."""

    def __init__(self, config: SandboxConfig, pool_config: PoolConfig, window_s: float) -> None:
        self.config = config
        self.pool_config = pool_config
        self.image = config.image
        self.provider: BoxProvider | None = None
        self.opening = threading.Lock()
        self.idle: collections.deque[ExecutorSandbox] = collections.deque()  # oldest first
        self.leased: set[ExecutorSandbox] = set()
        self.starting = 0
        self.resetting = 0  # taken back, being reset: still boxes under the caps
        self.reserved = 0  # boxes of other kinds stopping to make room for this one
        self.waiters: collections.deque[Waiter] = collections.deque()
        self.demand = Demand(window_s)
        self.floor = 0
        self.last_used = 0.0
        self.warm_hits = self.cold_starts = self.evictions = 0

    @property
    def live(self) -> int:
        return len(self.idle) + len(self.leased) + self.starting + self.resetting

    @property
    def unserved(self) -> int:
        """Waiters no box is on its way to (starting, or to start once room is made)."""
        return len(self.waiters) - self.starting - self.reserved

    def evictable(self) -> bool:
        """An idle box can go without taking the kind below its floor (``warm_default``)."""
        return bool(self.idle) and self.live > self.floor

    def keep(self, now: float) -> int:
        """How many boxes this kind keeps: its floor or its recent demand."""
        return max(self.floor, self.demand.target(now=now))


class ImagePool(PoolCore):
    """See the module docstring. ``provider_for`` makes the provider of one kind's boxes;
    the life, waiting and release rules are ``PoolCore``'s."""

    config: ImagePoolConfig
    _health_name = "sandbox-image-health"

    def __init__(
        self,
        provider_for: ProviderFactory,
        config: ImagePoolConfig | None = None,
        *,
        metrics: m.MetricsSink | None = None,
    ) -> None:
        self.config = config or ImagePoolConfig()
        super().__init__(metrics)
        self._provider_for = provider_for
        self._kinds: dict[str, _Kind] = {}
        self._kind_of: dict[ExecutorSandbox, _Kind] = {}
        self._stopping = 0
        self._stopping_mb = 0
        self._workers = _Workers(self.config.start_parallelism)
        self._default = self._kind(self.config.box)
        self._default.floor = self.config.warm_default
        self.default = ImageView(self, self._default)

    # -- life ---------------------------------------------------------------------------------
    def _warm_up(self) -> None:
        """Start the default kind's warm boxes (``start``'s part)."""
        self._provider(self._default).sweep()
        with self._lock:
            self._replenish_locked(self._default)

    def _wait_warm(self) -> None:
        kind = self._default
        self._wait_until(
            lambda: len(kind.idle) + len(kind.leased),
            self.config.warm_default,
            kind.config.start_timeout_s,
            lambda: bool(self._last_error),
        )

    def close(self) -> None:
        """Stop every box of every kind (leased ones too) and what the providers left."""
        with self._lock:
            if self._state is PoolState.CLOSED:
                return
            self._state = PoolState.CLOSED
            self._closing.set()
            kinds = list(self._kinds.values())
            boxes = [(kind, box) for kind in kinds for box in [*kind.idle, *kind.leased]]
            waiters = [waiter for kind in kinds for waiter in kind.waiters]
            for kind in kinds:
                kind.idle.clear()
                kind.leased.clear()
                kind.waiters.clear()
            self._changed.notify_all()
        for waiter in waiters:
            waiter.fail(SandboxStateError("the pool closed while waiting for a sandbox"))
        for kind, box in boxes:
            self._workers.submit(self._stop_box, kind, box)
        self._workers.shutdown()
        if self._health is not None and self._health is not threading.current_thread():
            self._health.join()
        for kind in kinds:
            if kind.provider is not None:
                kind.provider.close()
        exits.forget(self)

    def status(self) -> PoolStatus:
        """All kinds together (``size`` is the cap)."""
        with self._lock:
            kinds = list(self._kinds.values())
            return PoolStatus(
                size=self.config.max_boxes,
                ready=sum(len(k.idle) for k in kinds),
                leased=sum(len(k.leased) for k in kinds),
                starting=sum(k.starting for k in kinds) + self._stopping,
                waiting=sum(len(k.waiters) for k in kinds),
            )

    def kinds(self) -> list[KindStatus]:
        """Each kind of box now, the default first."""
        now = time.monotonic()
        with self._lock:
            return [
                KindStatus(
                    image=k.image,
                    ready=len(k.idle),
                    leased=len(k.leased),
                    starting=k.starting,
                    waiting=len(k.waiters),
                    target=k.keep(now),
                    warm_hits=k.warm_hits,
                    cold_starts=k.cold_starts,
                    evictions=k.evictions,
                )
                for k in self._kinds.values()
            ]

    # -- views ------------------------------------------------------------------------------
    def for_box(self, box: SandboxConfig) -> ImageView:
        """The ``SandboxPool`` of boxes made from ``box`` (made on first use)."""
        return ImageView(self, self._kind(box))

    def _kind(self, box: SandboxConfig) -> _Kind:
        key = box.model_dump_json()
        with self._lock:
            kind = self._kinds.get(key)
            if kind is None:
                kind = _Kind(box, self.config.pool_config(box), self.config.demand_window_s)
                self._kinds[key] = kind
            return kind

    # -- the default kind, as a plain SandboxPool -----------------------------------------------
    def acquire(self, *, timeout: float | None = None) -> Sandbox:
        return self.default.acquire(timeout=timeout)

    async def aacquire(self, *, timeout: float | None = None) -> Sandbox:
        return await self.default.aacquire(timeout=timeout)

    # -- acquire ------------------------------------------------------------------------------
    def _acquire(self, kind: _Kind, timeout: float | None) -> Sandbox:
        start = time.perf_counter()
        lease = self._lease_or_wait(kind, None)
        if isinstance(lease, Waiter):
            lease = self._wait(lease, kind.waiters, self._timeout(timeout), kind.image)
            return self._acquired(kind, lease, start, "cold")
        return self._acquired(kind, lease, start, "warm")

    async def _aacquire(self, kind: _Kind, timeout: float | None) -> Sandbox:
        start = time.perf_counter()
        lease = self._lease_or_wait(kind, asyncio.get_running_loop())
        if isinstance(lease, Waiter):
            lease = await self._await(lease, kind.waiters, self._timeout(timeout), kind.image)
            return self._acquired(kind, lease, start, "cold")
        return self._acquired(kind, lease, start, "warm")

    def _acquired(self, kind: _Kind, lease: PooledSandbox, start: float, path: str) -> Sandbox:
        seconds = time.perf_counter() - start
        self._metrics.observe(m.POOL_WAIT, seconds)
        self._metrics.observe(m.IMAGE_ACQUIRE, seconds, {"image": kind.image, "path": path})
        return lease

    def _lease_or_wait(
        self, kind: _Kind, loop: asyncio.AbstractEventLoop | None
    ) -> PooledSandbox | Waiter:
        """A lease on an idle box of ``kind``, or a waiter queued for the next one."""
        with self._lock:
            self._check_open_locked()
            if kind.idle:
                box = kind.idle.pop()  # the most recently used: the warmest
                kind.warm_hits += 1
                self._metrics.increment(m.WARM_HITS, {"image": kind.image})
                return self._lease_locked(kind, box)
            waiter = Waiter(loop)
            kind.waiters.append(waiter)
            self._schedule_locked()
            return waiter

    def _lease_locked(self, kind: _Kind, box: ExecutorSandbox) -> PooledSandbox:
        kind.leased.add(box)
        kind.last_used = now = time.monotonic()
        kind.demand.note(leased=len(kind.leased), now=now)
        return PooledSandbox(box, self)

    # -- release ------------------------------------------------------------------------------
    def release(self, sandbox: Sandbox) -> None:
        """Reset the box for its next user, or retire it. Never raises for a box's failure."""
        taken = self._take_back(sandbox)
        if taken is None:
            return
        kind, box = taken
        reason = self._reset_or_reason(box)
        self._retire(kind, box, reason, returned=True) if reason else self._put_ready(
            kind, box, returned=True
        )

    async def arelease(self, sandbox: Sandbox) -> None:
        taken = self._take_back(sandbox)
        if taken is None:
            return
        kind, box = taken
        reason = await self._areset_or_reason(box)
        self._retire(kind, box, reason, returned=True) if reason else self._put_ready(
            kind, box, returned=True
        )

    def _take_back(self, sandbox: Sandbox) -> tuple[_Kind, ExecutorSandbox] | None:
        if not isinstance(sandbox, PooledSandbox) or sandbox.owner is not self:
            raise SandboxStateError(f"{sandbox!r} was not acquired from this pool")
        box = sandbox.detach()
        with self._lock:
            if self._state is PoolState.CLOSED:
                return None  # close() stopped it already
            kind = self._kind_of[box]
            kind.leased.discard(box)
            kind.resetting += 1  # until _put_ready or _retire
            kind.demand.note(leased=len(kind.leased), now=time.monotonic())
        return kind, box

    # -- boxes coming and going -----------------------------------------------------------------
    def _put_ready(self, kind: _Kind, box: ExecutorSandbox, *, returned: bool = False) -> None:
        """Hand ``box`` to its kind's first waiter, or park it idle (and let the caps decide
        whether another kind's waiter needs its room). ``returned``: a released box, counted
        as resetting until now."""
        with self._lock:
            kind.resetting -= returned
            placed = self._place_locked(kind, box)
        if not placed:
            self._stop_box(kind, box)

    def _place_locked(self, kind: _Kind, box: ExecutorSandbox) -> bool:
        """``_put_ready``'s work, the lock held; False when the pool closed (stop the box)."""
        if self._state is not PoolState.OPEN:
            return False
        while kind.waiters:
            if self._hand_over(kind, kind.waiters.popleft(), box):
                return True
        kind.idle.append(box)
        self._schedule_locked()
        self._changed.notify_all()
        return True

    def _hand_over(self, kind: _Kind, waiter: Waiter, box: ExecutorSandbox) -> bool:
        """Give ``box`` to ``waiter`` (lock held); False if the waiter already left."""
        if waiter.gone():
            return False
        waiter.serve(self._lease_locked(kind, box), self._resolve)
        return True

    def _resolve(self, future: asyncio.Future[PooledSandbox], lease: PooledSandbox) -> None:
        if future.done():  # cancelled between hand-over and now: the box goes back
            taken = self._take_back(lease)
            if taken is not None:
                self._put_ready(*taken, returned=True)
        else:
            future.set_result(lease)

    def _retire(
        self, kind: _Kind, box: ExecutorSandbox, reason: str, *, returned: bool = False
    ) -> None:
        """Stop ``box``; start another if its kind still wants one."""
        logger.info("retiring sandbox %s of %s (%s)", box.id, kind.image, reason)
        self._metrics.increment(m.REPLACEMENTS)
        with self._lock:
            kind.resetting -= returned
            self._stopping += 1
            self._stopping_mb += kind.config.memory_mb
        self._workers.submit(self._stop_job, kind, box, None)

    def _room_for(self, config: SandboxConfig) -> bool:
        """Whether one more box of ``config`` fits under the caps (lock held)."""
        kinds = self._kinds.values()
        if sum(k.live for k in kinds) + self._stopping >= self.config.max_boxes:
            return False
        if self.config.max_memory_mb is None:
            return True
        used = sum(k.live * k.config.memory_mb for k in kinds) + self._stopping_mb
        return used + config.memory_mb <= self.config.max_memory_mb

    def _schedule_locked(self) -> None:
        """Start boxes for waiting kinds, oldest waiter first, evicting idle boxes of other
        kinds (least recently used first) when the caps are reached."""
        if self._state is not PoolState.OPEN:
            return
        waiting = sorted(
            (k for k in self._kinds.values() if k.unserved > 0),
            key=lambda k: k.waiters[0].created,
        )
        for kind in waiting:
            while kind.unserved > 0:
                if self._room_for(kind.config):
                    self._start_locked(kind, cold=True)
                elif self._evict_locked(exclude=kind, reason="lru"):
                    kind.reserved += 1  # its stop makes the room; then the start follows
                else:
                    return  # every box is leased: the next release serves the oldest waiter

    def _replenish_locked(self, kind: _Kind) -> None:
        """Start boxes until ``kind`` has what it keeps, as far as the caps allow."""
        want = kind.keep(time.monotonic())
        while self._state is PoolState.OPEN and kind.live < want and self._room_for(kind.config):
            self._start_locked(kind, cold=False)

    def _start_locked(self, kind: _Kind, *, cold: bool) -> None:
        kind.starting += 1
        self._workers.submit(self._start_job, kind, cold)

    def _evict_locked(self, *, exclude: _Kind, reason: str) -> bool:
        """Stop the least recently used kind's oldest idle box for ``exclude``'s sake;
        False if no kind has one to spare."""
        candidates = [k for k in self._kinds.values() if k.evictable() and k is not exclude]
        if not candidates:
            return False
        victim = min(candidates, key=lambda k: k.last_used)
        self._evict_box_locked(victim, victim.idle.popleft(), reason, exclude)
        return True

    def _evict_box_locked(
        self, kind: _Kind, box: ExecutorSandbox, reason: str, room_for: _Kind | None = None
    ) -> None:
        kind.evictions += 1
        self._metrics.increment(m.EVICTIONS, {"image": kind.image, "reason": reason})
        self._stopping += 1
        self._stopping_mb += kind.config.memory_mb
        self._workers.submit(self._stop_job, kind, box, room_for)

    def _provider(self, kind: _Kind) -> BoxProvider:
        """The kind's provider, opened on first use (on a worker thread: it does I/O)."""
        with kind.opening:
            if kind.provider is None:
                provider = self._provider_for(kind.pool_config)
                provider.open()
                kind.provider = provider
            return kind.provider

    def _start_job(self, kind: _Kind, cold: bool) -> None:
        box: ExecutorSandbox | None = None
        placed = False
        error = "the pool is closing"
        if not self._closing.is_set():
            what = f"a sandbox of {kind.image}"
            started = self._start_box(lambda: self._provider(kind).start_box(), logger, what)
            if isinstance(started, SandboxError):
                error = str(started)
            else:
                box = started
                if cold:
                    self._metrics.increment(m.COLD_STARTS, {"image": kind.image})
        with self._changed:
            kind.starting -= 1
            if box is not None:
                # placed under the same lock as the count drops: no schedule in between may
                # see this kind's waiter unserved and start a second box for it
                self._kind_of[box] = kind
                kind.cold_starts += cold
                placed = self._place_locked(kind, box)
            else:
                self._last_error = error
                if kind.waiters and self._state is PoolState.OPEN:
                    kind.waiters.popleft().fail(
                        SandboxError(f"a sandbox of {kind.image} failed to start: {error}")
                    )
                self._changed.notify_all()
        if box is not None and not placed:
            self._stop_box(kind, box)

    def _stop_job(self, kind: _Kind, box: ExecutorSandbox, room_for: _Kind | None) -> None:
        """Stop a retired or evicted box; its room goes to the kind it was evicted for, or
        (a retired box) back to its own kind if that kind still wants it."""
        self._stop_box(kind, box)
        with self._changed:
            self._stopping -= 1
            self._stopping_mb -= kind.config.memory_mb
            if room_for is not None:
                room_for.reserved -= 1
            else:
                self._replenish_locked(kind)
            self._schedule_locked()
            self._changed.notify_all()

    def _stop_box(self, kind: _Kind, box: ExecutorSandbox) -> None:
        with self._lock:
            self._kind_of.pop(box, None)
        if kind.provider is not None:
            kind.provider.stop_box(box)

    def _health_loop(self) -> None:
        while not self._closing.wait(self.config.health_interval_s):
            self.health_pass()

    def health_pass(self) -> None:
        """Ping idle boxes (retire the unresponsive), stop idle boxes beyond each kind's
        demand, replace retired ones up to it. The health thread calls it; tests may too."""
        with self._lock:
            idle = [(kind, box) for kind in self._kinds.values() for box in kind.idle]
        for kind, box in idle:
            with self._lock:
                if box not in kind.idle:
                    continue
                kind.idle.remove(box)
            try:
                box.ping()
            except SandboxError:
                self._retire(kind, box, box.death_reason or "unresponsive")
                continue
            self._put_ready(kind, box)
        now = time.monotonic()
        with self._lock:
            if self._state is not PoolState.OPEN:
                return
            for kind in self._kinds.values():
                surplus = kind.live - kind.keep(now)
                while surplus > 0 and kind.idle and not kind.waiters:
                    self._evict_box_locked(kind, kind.idle.popleft(), "demand")
                    surplus -= 1
                self._replenish_locked(kind)


class ImageView(Leases):
    """The ``SandboxPool`` of one kind of box of an ``ImagePool`` (``pool.for_box(...)``).

    ``close`` does nothing: the pool belongs to whoever made it.
    """

    def __init__(self, pool: ImagePool, kind: _Kind) -> None:
        self.pool = pool
        self._kind = kind

    @property
    def box(self) -> SandboxConfig:
        return self._kind.config

    def acquire(self, *, timeout: float | None = None) -> Sandbox:
        return self.pool._acquire(self._kind, timeout)

    def release(self, sandbox: Sandbox) -> None:
        self.pool.release(sandbox)

    async def aacquire(self, *, timeout: float | None = None) -> Sandbox:
        return await self.pool._aacquire(self._kind, timeout)

    async def arelease(self, sandbox: Sandbox) -> None:
        await self.pool.arelease(sandbox)

    def close(self) -> None:
        pass


class _Workers:
    """The pool's threads for starting and stopping boxes; after ``shutdown`` a job runs
    on the caller's thread (the interpreter may be exiting: no new threads)."""

    def __init__(self, parallelism: int) -> None:
        self._executor = ThreadPoolExecutor(parallelism, "sandbox-image-pool")

    def submit(self, job: Callable[..., None], *args: object) -> None:
        try:
            self._executor.submit(job, *args)
        except RuntimeError:
            job(*args)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True)
