"""The control plane: servers in and out of rotation, and one policy version for all of them.

* **Start.** The supervisor (Ray) starts the servers; each joins the rotation once it
  answers ``/health`` and serves the cluster's version. The cluster starts at the highest
  version its servers come back at (a restart of the whole cluster resumes), and servers
  behind it catch up from the weight store.
* **Watch.** Every ``health_interval_s`` each server in rotation is checked. One that does
  not answer leaves the rotation at once: its sessions are lost (their calls get a clear
  ``server_lost``), the router sends it nothing new. Then it is *recovered*: Ray restarts
  it (a dead process is restarted by Ray itself; a live but broken one is killed so that
  Ray restarts it), the new process reopens its buffer, catches up to the cluster's
  version, gets the acks kept for it and its share of the job, and only then rejoins.
* **Weights.** ``update`` fans one staged copy out to every server in rotation, concurrently
  (its path to a server on the router's Ray node, an upload to one on another node: it
  does not share the router's files; ``weights_transport``), and moves the version by the
  rules of ``rollgym.cluster.versions``: an update counts once every server in rotation
  applied it; one that failed is recovered like a dead one.
  Updates and recoveries take one lock, so a rejoining server catches up to a version
  that no update is halfway through.
* **Scale** (``scale``, ``rollgym cluster scale N``). A new server comes up, catches up to
  the cluster's version under the same lock and only then joins the rotation; the job is
  split again over the rotation. A server removed (the last ones first) leaves the
  rotation at once and is ``draining``: its rollout job stops after the episodes in
  flight (they finish into its buffer), its open sessions go on, its buffer is pulled by
  the trainer and its leases acked through the router; once all of that is done, or
  after ``drain_timeout_s``, its remaining sessions are lost (their calls get
  ``server_lost``: "removed from the cluster"), Ray stops it, and it is gone. Groups still
  in its buffer at the time out stay in its data dir (durable) and come back with the
  slot when the cluster grows again; acks for its leases are kept for that day.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from rollgym.cluster.actor import Whereabouts
from rollgym.cluster.config import ClusterConfig
from rollgym.cluster.errors import (
    ClusterError,
    FanoutFailed,
    InvalidRequest,
    ServerAnswered,
    ServerUnreachable,
)
from rollgym.cluster.fleet import Fleet, Slot, SlotState
from rollgym.cluster.servers import ServerAPI
from rollgym.cluster.status import ClusterStatus, NodeStatus, ServerStatus
from rollgym.cluster.supervisor import Node, Supervisor
from rollgym.cluster.versions import Answer, Applied, Refused, Unreachable, catch_up_steps, settle
from rollgym.cluster.weights import Staged, WeightStore
from rollgym.cluster.work import ClusterWork
from rollgym.contract.wire import (
    ErrorBody,
    ErrorCode,
    NcclInit,
    NcclUpdate,
    PolicyInfo,
    WeightUpdateResult,
)

logger = logging.getLogger(__name__)
Connect = Callable[[str], ServerAPI]
_HEALTHY_POLL_S = 0.5
_DRAIN_POLL_S = 0.2


class ControlPlane:
    """See the module docstring. ``async with ControlPlane(...) as control:``"""

    def __init__(
        self, config: ClusterConfig, supervisor: Supervisor, store: WeightStore, connect: Connect
    ):
        self.config = config
        self.supervisor = supervisor
        self.store = store
        self.connect = connect
        self.fleet = Fleet(config.servers)
        self.work = ClusterWork(self.fleet)
        self.version = 0
        self._lock = asyncio.Lock()  # weight updates and catch-ups, one at a time
        self._recoveries: dict[int, asyncio.Task[None]] = {}
        self._scaling = asyncio.Lock()  # one scale at a time
        self._monitor: asyncio.Task[None] | None = None
        self._closed = False
        self.on_fanout: Callable[[float], None] = lambda seconds: None
        self.nodes: list[Node] = []  # the Ray cluster's, refreshed with each health check

    # --- life ------------------------------------------------------------------------------

    async def __aenter__(self) -> ControlPlane:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        await self.supervisor.start()
        await asyncio.gather(*(self._come_up(slot) for slot in self.fleet.slots))
        self.nodes = await self.supervisor.nodes()
        versions = [s.version for s in self.fleet.slots if s.version is not None]
        self.version = max(versions, default=0)
        async with self._lock:
            for slot in self.fleet.slots:
                if slot.state is SlotState.STARTING:
                    await self._join(slot)
        self._monitor = asyncio.create_task(self._watch())

    async def close(self) -> None:
        """Stop watching, then stop every server and Ray (idempotent)."""
        if self._closed:
            return
        self._closed = True
        tasks = [t for t in (self._monitor, *self._recoveries.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for slot in self.fleet.slots:
            if slot.api is not None:
                await slot.api.close()
        await self.supervisor.stop(timeout_s=60.0)

    async def _come_up(self, slot: Slot) -> None:
        """Find the slot's (new) process and wait until it answers; note its version."""
        try:
            await self._follow(
                slot, await self.supervisor.locate(slot.index, self.config.start_timeout_s)
            )
            slot.version = await self._healthy(slot)
        except ClusterError as exc:
            self._fail(slot, str(exc))

    async def _follow(self, slot: Slot, where: Whereabouts) -> None:
        """Talk to the process ``where`` describes (a new one after each restart)."""
        if (slot.node, slot.pid) == where.incarnation and slot.api is not None:
            return
        if slot.pid is not None:
            slot.restarts += 1
        slot.node, slot.pid = where.incarnation
        if slot.api is not None:
            await slot.api.close()
        slot.api = self.connect(where.url)

    async def _healthy(self, slot: Slot) -> int:
        """Wait until the slot's server answers; follow it if it restarts meanwhile."""
        deadline = time.monotonic() + self.config.start_timeout_s
        while True:
            assert slot.api is not None
            try:
                return (await slot.api.health()).policy_version
            except ClusterError:
                where = await self.supervisor.locate(slot.index, 30.0)
                if where.failed:
                    raise ServerUnreachable(f"the server failed to start: {where.failed}") from None
                await self._follow(slot, where)
                if time.monotonic() > deadline:
                    raise
            await asyncio.sleep(_HEALTHY_POLL_S)

    async def _join(self, slot: Slot) -> None:
        """Catch ``slot`` up to the cluster's version (lock held), then rejoin the rotation."""
        if slot.state is SlotState.FAILED or slot.api is None or slot.version is None:
            return
        try:
            steps = catch_up_steps(slot.version, self.version)
            if steps:
                current = await asyncio.to_thread(self.store.current)
                if current is None or current[1] != self.version:
                    raise ClusterError(
                        f"it is at version {slot.version} and the cluster has no copy of "
                        f"version {self.version}'s weights to catch it up"
                    )
                for _ in range(steps):
                    await self._apply(slot, current[0])
            slot.state = SlotState.SERVING  # resume_on needs it in rotation for its acks
            slot.reason = None
            await self.work.resume_on(slot)
        except (ClusterError, ValueError) as exc:
            self._fail(slot, f"cannot rejoin: {exc}")

    def _fail(self, slot: Slot, reason: str) -> None:
        logger.error("server %s failed: %s", slot.name, reason)
        slot.state = SlotState.FAILED
        slot.reason = reason

    # --- watching and recovering -----------------------------------------------------------

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.config.health_interval_s)
            await asyncio.gather(*(self._check(s) for s in self.fleet.rotation()))
            try:
                self.nodes = await self.supervisor.nodes()
            except Exception as exc:  # Ray's view is for the status: never end the watch
                logger.warning("could not list Ray's nodes: %r", exc)
            if self.work.job is not None:
                with contextlib.suppress(ClusterError):
                    await self.work.status()  # refreshes each server's episodes in flight

    async def _check(self, slot: Slot) -> None:
        if slot.api is None:
            return
        try:
            await slot.api.health()
        except ClusterError as exc:
            self.evict(slot, f"health check failed: {exc}")

    def evict(self, slot: Slot, reason: str, *, restart: bool = False) -> None:
        """Take ``slot`` out of rotation now and recover it in the background."""
        if slot.state in (SlotState.RECOVERING, SlotState.FAILED, SlotState.DRAINING):
            return  # a draining one is being removed: not brought back
        lost = self.fleet.sessions.lose(slot.name)
        groups = self.fleet.groups.lose(slot.name)
        logger.warning(
            "server %s leaves the rotation (%s); %d sessions and %d filling groups lost",
            slot.name,
            reason,
            lost,
            groups,
        )
        slot.state = SlotState.RECOVERING
        slot.reason = reason
        slot.episodes = 0
        self._recoveries[slot.index] = asyncio.create_task(self._recover(slot, restart))

    async def _recover(self, slot: Slot, restart: bool) -> None:
        try:
            await self._replace(slot, restart)
        except Exception as exc:  # anything unforeseen: say so in the status, never hang
            logger.exception("recovering server %s failed", slot.name)
            self._fail(slot, f"recovery failed: {exc!r}")

    async def _replace(self, slot: Slot, restart: bool) -> None:
        old = (slot.node, slot.pid)
        try:
            where = await self.supervisor.locate(slot.index, 10.0)
            if restart or where.incarnation == old:  # alive but broken: have Ray replace it
                await self.supervisor.restart(slot.index)
        except ClusterError:
            pass  # dead already: Ray is restarting it
        await self._come_up(slot)
        if slot.state is SlotState.FAILED:
            return
        async with self._lock:
            await self._join(slot)
        logger.info("server %s rejoined at version %s", slot.name, slot.version)

    # --- scaling ---------------------------------------------------------------------------

    async def scale(self, servers: int) -> ClusterStatus:
        """Add or remove servers until there are ``servers`` (see the module docstring)."""
        limit = self.config.servers_limit
        if not 1 <= servers <= limit:
            raise InvalidRequest(
                f"servers must be 1 to {limit} (max_servers); got {servers}: a local Ray was "
                "sized for max_servers, so raise ROLLGYM_CLUSTER__MAX_SERVERS at `cluster up`"
            )
        async with self._scaling:
            slots = self.fleet.slots
            while len(slots) < servers:
                await self._add(Slot(len(slots)))
            while len(slots) > servers:
                await self._remove(slots[-1])
        return self.status()

    async def _add(self, slot: Slot) -> None:
        slot.pending_acks = self.fleet.retired_acks.pop(slot.name, set())
        self.fleet.slots.append(slot)  # starting: no traffic until it has caught up
        await self.supervisor.add(slot.index)
        await self._come_up(slot)
        async with self._lock:
            await self._join(slot)
        await self._reshare()
        logger.info("server %s added at version %s (%s)", slot.name, slot.version, slot.state)

    async def _remove(self, slot: Slot) -> None:
        was_serving = slot.serving
        slot.state, slot.reason = SlotState.DRAINING, "being removed: draining"
        slot.episodes = 0
        await self._reshare()
        if was_serving and slot.api is not None:
            with contextlib.suppress(ClusterError):
                await slot.api.stop_rollouts(drain=True)  # its episodes finish into its buffer
            await self._drain(slot, time.monotonic() + self.config.drain_timeout_s)
        lost = self.fleet.sessions.lose(slot.name)
        self.fleet.groups.lose(slot.name)
        if slot.pending_acks:
            self.fleet.retired_acks[slot.name] = set(slot.pending_acks)
        await self.supervisor.remove(slot.index, timeout_s=60.0)
        if slot.api is not None:
            await slot.api.close()
        self.fleet.slots.pop()
        logger.info("server %s removed; %d open sessions were lost", slot.name, lost)

    async def _drain(self, slot: Slot, deadline: float) -> None:
        """Wait until ``slot`` holds nothing: no session, no episode, no group buffered or
        leased; or until ``deadline``, or until it stops answering."""
        assert slot.api is not None
        while time.monotonic() < deadline:
            try:
                rollouts = await slot.api.rollouts()
            except ClusterError:
                return  # gone: what it buffered is in its data dir
            held = (
                self.fleet.sessions.open_on(slot.name)
                + rollouts.in_flight
                + rollouts.buffered_groups
                + self.work.leased_from(slot.name)
            )
            if held == 0:
                return
            await asyncio.sleep(_DRAIN_POLL_S)
        logger.warning("server %s did not drain in time; removing it anyway", slot.name)

    async def _reshare(self) -> None:
        """Split the job again over the rotation (a server came or is leaving)."""
        if self.work.job is not None:
            with contextlib.suppress(ClusterError):
                await self.work.start(self.work.job)

    # --- weights ---------------------------------------------------------------------------

    @property
    def updating(self) -> bool:
        return self._lock.locked()

    async def update(self, staged: Staged, expected: int | None) -> WeightUpdateResult:
        """Fan ``staged`` out to the rotation; commit it as the next version if it moved."""
        try:
            return await self._update(expected, lambda slot: self._apply(slot, staged), staged)
        except BaseException:
            await asyncio.to_thread(self.store.discard, staged)
            raise

    async def update_nccl(self, announced: NcclUpdate) -> WeightUpdateResult:
        """GPU hosts: every server in rotation receives the trainer's NCCL broadcast.

        Nothing is staged: until the next file update, a server that leaves the rotation
        cannot catch up and stays out (``failed``, with the reason)."""

        async def receive(slot: Slot) -> WeightUpdateResult:
            assert slot.api is not None
            update = announced.model_copy(update={"expected_version": self.version})
            result = await slot.api.nccl_update(update)
            slot.version = result.policy_version
            return result

        return await self._update(announced.expected_version, receive, None)

    async def nccl_init(self, body: NcclInit) -> PolicyInfo:
        """Every server in rotation joins the trainer's NCCL group, one rank after another
        (``rank_offset``, ``rank_offset + 1``...: one rank per server)."""
        rotation = self.fleet.rotation()
        if not rotation:
            raise FanoutFailed("no server is in rotation to join the NCCL group")
        answers = await asyncio.gather(
            *(
                s.api.nccl_init(body.model_copy(update={"rank_offset": body.rank_offset + i}))
                for i, s in enumerate(rotation)
                if s.api is not None
            )
        )
        return answers[0].model_copy(update={"policy_version": self.version})

    async def _update(
        self,
        expected: int | None,
        apply: Callable[[Slot], Awaitable[WeightUpdateResult]],
        staged: Staged | None,
    ) -> WeightUpdateResult:
        started = time.perf_counter()
        async with self._lock:
            if expected is not None and expected != self.version:
                raise ServerAnswered(
                    409,
                    ErrorBody(
                        error=ErrorCode.VERSION_MISMATCH,
                        message=f"the cluster is at policy version {self.version}, not {expected}",
                    ),
                )
            rotation = self.fleet.rotation()
            if not rotation:
                raise FanoutFailed("no server is in rotation to take the weights: retry shortly")
            answers, results = await self._fan_out(rotation, apply)
            settled = settle(self.version, answers)
            for name in settled.evicted:
                self.evict(self.fleet.by_name(name), "failed a weight update", restart=True)
            if settled.refusal is not None:
                raise ServerAnswered(settled.refusal.status, settled.refusal.error)
            if not settled.applied:
                raise FanoutFailed("no server applied the weights; they are being restarted")
            if staged is not None:
                await asyncio.to_thread(self.store.commit, staged, settled.version)
            self.version = settled.version
        self.on_fanout(time.perf_counter() - started)
        return WeightUpdateResult(
            policy_version=self.version,
            bytes=results[0].bytes,
            load_s=max(r.load_s for r in results),
            apply_s=max(r.apply_s for r in results),
            in_flight_policy=results[0].in_flight_policy,
        )

    async def _fan_out(
        self, rotation: list[Slot], apply: Callable[[Slot], Awaitable[WeightUpdateResult]]
    ) -> tuple[dict[str, Answer], list[WeightUpdateResult]]:
        """Run ``apply`` on every slot of ``rotation`` at once; each one's answer."""
        answers: dict[str, Answer] = {}
        results: list[WeightUpdateResult] = []

        async def one(slot: Slot) -> None:
            try:
                result = await apply(slot)
            except ServerAnswered as exc:
                answers[slot.name] = Refused(exc.status, exc.body())
            except ClusterError as exc:
                answers[slot.name] = Unreachable(str(exc))
            else:
                answers[slot.name] = Applied(result.policy_version)
                results.append(result)

        await asyncio.gather(*(one(slot) for slot in rotation))
        return answers, results

    async def _apply(self, slot: Slot, staged: Staged) -> WeightUpdateResult:
        """Load ``staged`` on ``slot``: its version moves from what it is now by one."""
        assert slot.api is not None and slot.version is not None
        expected = slot.version
        if self.transport_to(slot) == "shared_file":
            result = await slot.api.weights_from_path(staged.folder, expected)
        else:
            if len(staged.files) != 1:
                raise ServerAnswered(
                    400,
                    ErrorBody(
                        error=ErrorCode.BAD_WEIGHTS,
                        message="the http transport sends one safetensors file; "
                        f"got {len(staged.files)}",
                    ),
                )
            result = await slot.api.upload_weights(staged.files[0], expected)
        slot.version = result.policy_version
        return result

    def transport_to(self, slot: Slot) -> str:
        """How weights reach ``slot``: by the configured transport, or for ``auto`` by
        where it runs (a server on another node does not share the router's files)."""
        if self.config.weights_transport != "auto":
            return self.config.weights_transport
        return "shared_file" if slot.node == self.supervisor.local_node else "http"

    # --- what the router shows -------------------------------------------------------------

    def status(self) -> ClusterStatus:
        shares = {s.name: self.work.share_of(s) for s in self.fleet.slots}
        return ClusterStatus(
            policy_version=self.version,
            updating=self.updating,
            servers=[
                ServerStatus(
                    name=s.name,
                    state=s.state.value,
                    url=s.api.url if s.api is not None else None,
                    pid=s.pid,
                    policy_version=s.version,
                    restarts=s.restarts,
                    sessions=self.fleet.sessions.open_on(s.name),
                    in_flight=s.in_flight,
                    episodes=s.episodes,
                    share=share.groups_per_batch if (share := shares[s.name]) else 0,
                    reason=s.reason,
                    node=s.node,
                    weights_by=self.transport_to(s) if s.node is not None else None,
                )
                for s in self.fleet.slots
            ],
            weights_transport=self.config.weights_transport,
            nodes=[
                NodeStatus(
                    node_id=n.node_id,
                    address=n.address,
                    alive=n.alive,
                    cpus=n.cpus,
                    router=n.node_id == self.supervisor.local_node,
                    servers=[s.name for s in self.fleet.slots if s.node == n.node_id],
                )
                for n in self.nodes
            ],
        )
