"""Fakes for the cluster's unit tests (real twins: ``HttpServer`` against ``rollgym serve``
and ``RaySupervisor``, exercised by ``tests/e2e/test_cluster_e2e.py``).

* ``FakeServer``: one rollout server in memory (``ServerAPI``): a version, a buffer of
  groups (ready, leased, acked; the acked ones are its archive), a rollout job, sessions
  (each its maker's: another ``Authorization`` gets 404, as from the server), and the
  routes the router forwards.
* ``FakeBox``: the durable part of a server (its buffer and version), which a restart
  reopens, as a server's data dir is, and its settings (``forbidden_envs``: a job on one
  of them is refused with the server's 403).
* ``FakeSupervisor``: slots of fake servers; ``kill(i)`` is a SIGKILL (the server stops
  answering), and ``locate`` then finds a new incarnation on the same box, as Ray's
  restart would.

This module holds no tests; the test modules import it.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from rollgym.cluster.actor import Whereabouts
from rollgym.cluster.config import ClusterConfig
from rollgym.cluster.errors import ServerAnswered, ServerUnreachable
from rollgym.cluster.servers import Reply
from rollgym.cluster.supervisor import Node
from rollgym.contract.archive import ArchivedGroup, ArchivePage, ArchiveQuery
from rollgym.contract.dashboard import DashboardData, Series, Stages
from rollgym.contract.wire import (
    ErrorBody,
    ErrorCode,
    Health,
    NcclInit,
    NcclUpdate,
    PolicyInfo,
    PullRequest,
    PullResponse,
    RolloutJob,
    RolloutStatus,
    Trajectory,
    TrajectoryGroup,
    WeightUpdateResult,
)

TOKEN = "unit-test-cluster-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
_PIDS = itertools.count(1000)


def config(tmp_path: Path, servers: int = 2, **kwargs: object) -> ClusterConfig:
    return ClusterConfig(
        servers=servers,
        admin_token=TOKEN,
        data_dir=tmp_path,
        health_interval_s=0.01,
        start_timeout_s=5.0,
        **kwargs,  # type: ignore[arg-type]
    )


def group(version: int, group_id: str | None = None) -> TrajectoryGroup:
    trajectory = Trajectory(
        id=uuid.uuid4().hex, group_id=group_id or uuid.uuid4().hex, env_id="e", prompt_ids=[1],
        completion_ids=[2], logprobs=[-0.1], loss_mask=[1], reward=1.0, terminated=True,
        truncated=False, min_version=version, max_version=version, turns=[], created_at=time.time(),
    )  # fmt: skip
    return TrajectoryGroup(group_id=trajectory.group_id, env_id="e", trajectories=[trajectory])


def dashboard(version: int) -> DashboardData:
    """A server's dashboard data before anything ran."""
    return DashboardData(
        now=time.time(), started_at=0.0, interval_s=2.0, model="m", policy_version=version,
        trainer_version=None, trainer_step=None, totals={},
        stages=Stages(bucket_s=1.0, t=[0.0], busy={}, totals={}),
        series=Series(
            t=[], policy_version=[], buffer_ready=[], buffer_leased=[], inflight=[],
            trajectories=[], dropped={}, model_p50=[], model_p90=[], env_p50=[], env_p90=[],
        ),
        latency={}, version_lag=[], rewards=[],
    )  # fmt: skip


@dataclasses.dataclass
class FakeBox:
    """What a restart reopens: the buffer (group id -> state) and the applied version."""

    version: int = 0
    groups: dict[str, tuple[TrajectoryGroup, str]] = dataclasses.field(default_factory=dict)
    forbidden_envs: set[str] = dataclasses.field(default_factory=set)

    def put(self, g: TrajectoryGroup) -> None:
        self.groups[g.group_id] = (g, "ready")

    def states(self) -> dict[str, str]:
        return {gid: state for gid, (_, state) in self.groups.items()}


class FakeServer:
    """``ServerAPI`` in memory (see the module docstring)."""

    def __init__(self, box: FakeBox, url: str):
        self.box = box
        self.url = url
        self.dead = False
        self.fail_updates: int | None = None  # answer this status to weight updates
        self.job: RolloutJob | None = None
        self.sessions: dict[str, str | None] = {}  # id -> the Authorization that made it
        self.calls: list[str] = []
        self.loaded: list[Path] = []
        self.nccl_rank: int | None = None
        self.crash_on_health = False  # dies at its first health check (a crash at start-up)

    def _alive(self, what: str) -> None:
        self.calls.append(what)
        if self.dead:
            raise ServerUnreachable(f"{self.url} is dead")

    async def health(self) -> Health:
        if self.crash_on_health:
            self.dead = True
        self._alive("health")
        return Health(policy_version=self.box.version)

    async def pull(self, request: PullRequest) -> PullResponse:
        self._alive("pull")
        ready = [g for g, state in self.box.groups.values() if state == "ready"]
        taken = ready[: request.num_groups]
        for g in taken:
            self.box.groups[g.group_id] = (g, "leased")
        return PullResponse(
            lease_id="l" if taken else None, groups=taken, dropped_stale=0,
            policy_version=self.box.version,
        )  # fmt: skip

    async def ack(self, group_ids: Sequence[str]) -> int:
        self._alive("ack")
        acked = 0
        for gid in group_ids:
            if gid in self.box.groups:
                self.box.groups[gid] = (self.box.groups[gid][0], "acked")
                acked += 1
        return acked

    async def _update(self, expected: int) -> WeightUpdateResult:
        if self.fail_updates is not None:
            raise ServerAnswered(
                self.fail_updates, ErrorBody(error=ErrorCode.BAD_WEIGHTS, message="no")
            )
        if expected != self.box.version:
            raise ServerAnswered(
                409, ErrorBody(error=ErrorCode.VERSION_MISMATCH, message="version")
            )
        self.box.version += 1
        return WeightUpdateResult(
            policy_version=self.box.version, bytes=1, load_s=0.0, apply_s=0.0,
            in_flight_policy="finish",
        )  # fmt: skip

    async def weights_from_path(self, path: Path, expected: int) -> WeightUpdateResult:
        self._alive("weights")
        self.loaded.append(path)
        return await self._update(expected)

    async def upload_weights(self, file: Path, expected: int) -> WeightUpdateResult:
        self._alive("weights")
        self.loaded.append(file)
        return await self._update(expected)

    async def nccl_init(self, body: NcclInit) -> PolicyInfo:
        self._alive("nccl_init")
        self.nccl_rank = body.rank_offset
        return PolicyInfo(policy_version=self.box.version, model="m", updating=False)

    async def nccl_update(self, body: NcclUpdate) -> WeightUpdateResult:
        self._alive("nccl")
        assert body.expected_version is not None
        return await self._update(body.expected_version)

    async def start_rollouts(self, job: RolloutJob) -> RolloutStatus:
        self._alive("start")
        if job.env_id in self.box.forbidden_envs:
            raise ServerAnswered(
                403, ErrorBody(error=ErrorCode.FORBIDDEN, message=f"{job.env_id} is not allowed")
            )
        self.job = job
        return await self.rollouts()

    async def stop_rollouts(self, drain: bool) -> RolloutStatus:
        self._alive("stop")
        self.job = None
        return await self.rollouts()

    async def rollouts(self) -> RolloutStatus:
        self._alive("rollouts")
        buffered = sum(state in ("ready", "leased") for state in self.box.states().values())
        return RolloutStatus(
            running=self.job is not None, job=self.job, in_flight=0, buffered_groups=buffered,
            completed_groups=len(self.box.groups), dropped_zero_variance=0,
            invalid_trajectories=0,
        )  # fmt: skip

    async def archive(self, query: ArchiveQuery) -> ArchivePage:
        """The acked groups, in the order they were put, ``seq`` 1, 2, ..."""
        self._alive("archive")
        acked = [g for g, state in self.box.groups.values() if state == "acked"]
        items = [
            ArchivedGroup(seq=seq, outcome="trained", archived_at=0.0, group=g)
            for seq, g in enumerate(acked, start=1)
            if seq > query.after
        ][: query.limit]
        more = bool(items) and items[-1].seq < len(acked)
        return ArchivePage(items=items, next_after=items[-1].seq if more else None)

    async def forward(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes
    ) -> Reply:
        self._alive(f"{method} {path}")
        json_type = {"content-type": "application/json"}
        caller = {k.lower(): v for k, v in headers.items()}.get("authorization")
        if method == "POST" and path == "/v1/sessions":
            session_id = uuid.uuid4().hex
            self.sessions[session_id] = caller
            return Reply(201, json_type, json.dumps({"session_id": session_id}).encode())
        if path.startswith("/v1/sessions/"):
            session_id = path.split("/")[3]
            if self.sessions.get(session_id, "") != caller:  # another key's: as if absent
                return Reply(404, json_type, b'{"error": "not_found", "message": "no session"}')
            if method == "DELETE":
                del self.sessions[session_id]
            return Reply(200, json_type, json.dumps({"session_id": session_id}).encode())
        if path == "/metrics":
            return Reply(200, {}, b"# TYPE rollgym_up gauge\nrollgym_up 1.0\n")
        if path.startswith("/dashboard/data"):
            return Reply(200, json_type, dashboard(self.box.version).model_dump_json().encode())
        if path == "/v1/models":
            return Reply(200, json_type, b'{"object": "list", "data": [{"id": "m"}]}')
        if path == "/v1/policy":
            policy = {"policy_version": self.box.version, "model": "m", "updating": False}
            return Reply(200, json_type, json.dumps(policy).encode())
        return Reply(200, json_type, json.dumps({"path": path, "url": self.url}).encode())

    async def close(self) -> None:
        pass


class FakeSupervisor:
    """Slots of fake servers that ``kill`` and restart like Ray actors (module docstring)."""

    def __init__(self, servers: int, boxes: list[FakeBox] | None = None):
        self.boxes = boxes or [FakeBox() for _ in range(servers)]
        self.servers = [self._incarnate(i) for i in range(servers)]
        self.pids = [next(_PIDS) for _ in range(servers)]
        self.restarted: list[int] = []
        self.started = self.stopped = False
        self.local_node = "node-router"
        self.node_of: list[str] = [self.local_node] * servers  # where each slot's server runs

    def _incarnate(self, slot: int) -> FakeServer:
        return FakeServer(self.boxes[slot], f"http://fake-{slot}-{uuid.uuid4().hex[:6]}")

    def kill(self, slot: int) -> None:
        """SIGKILL: the process stops answering; the next ``locate`` finds its restart."""
        self.servers[slot].dead = True

    async def start(self) -> None:
        self.started = True

    async def locate(self, slot: int, timeout_s: float) -> Whereabouts:
        if self.servers[slot].dead:  # Ray restarts a dead actor with the same arguments
            await self.restart(slot)
        server = self.servers[slot]
        return Whereabouts(
            url=server.url, pid=self.pids[slot], serving=True, failed=None,
            node_id=self.node_of[slot],
        )  # fmt: skip

    async def nodes(self) -> list[Node]:
        return [Node(node_id=n, address=n, alive=True, cpus=1.0) for n in sorted(set(self.node_of))]

    async def restart(self, slot: int) -> None:
        self.restarted.append(slot)
        self.servers[slot] = self._incarnate(slot)
        self.pids[slot] = next(_PIDS)

    async def add(self, slot: int) -> None:
        assert slot == len(self.servers), "servers are added at the end"
        if slot >= len(self.boxes):
            self.boxes.append(FakeBox())
        self.servers.append(self._incarnate(slot))
        self.pids.append(next(_PIDS))
        self.node_of.append(self.local_node)

    async def remove(self, slot: int, timeout_s: float) -> None:
        assert slot == len(self.servers) - 1, "servers are removed from the end"
        self.servers.pop().dead = True
        self.pids.pop()
        self.node_of.pop()

    async def stop(self, timeout_s: float) -> None:
        self.stopped = True

    def connect(self, url: str) -> FakeServer:
        return next(s for s in self.servers if s.url == url)
