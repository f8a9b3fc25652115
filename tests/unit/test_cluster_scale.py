"""Elastic servers with fake servers: `cluster scale` adds a server that has caught up
before it takes work, and removes one that drains its sessions, episodes and buffer first.

The real twin is tests/e2e/test_cluster_e2e.py's scaling test (Ray and real servers)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from cluster_fakes import ADMIN, FakeSupervisor, config, group

from rollgym.cluster.control import ControlPlane
from rollgym.cluster.errors import InvalidRequest, ServerLost
from rollgym.cluster.fleet import SlotState
from rollgym.cluster.router import SERVER_HEADER, create_router
from rollgym.cluster.routing import Owner
from rollgym.cluster.status import SCALE
from rollgym.cluster.weights import WeightStore
from rollgym.contract.wire import PullRequest, RolloutJob

JOB = RolloutJob(env_id="e", groups_per_batch=4, max_staleness=1)
PULL = PullRequest(trainer_version=1, max_staleness=1, num_groups=8, timeout_s=0)


@contextlib.asynccontextmanager
async def plane(tmp_path: Path, supervisor: FakeSupervisor, **kwargs: object) -> AsyncIterator:
    cfg = config(tmp_path, servers=len(supervisor.servers), max_servers=2, **kwargs)
    store = WeightStore(cfg.weights_dir, max_bytes=1 << 20)
    async with ControlPlane(cfg, supervisor, store, supervisor.connect) as control:
        yield control


async def at_version_1(control: ControlPlane, tmp_path: Path) -> None:
    (tmp_path / "w.safetensors").write_bytes(b"weights")
    await control.update(control.store.stage_path(tmp_path / "w.safetensors"), expected=0)


async def test_scale_1_2_1_during_a_run_loses_nothing_and_mixes_no_version(tmp_path) -> None:
    supervisor = FakeSupervisor(1)
    async with plane(tmp_path, supervisor, drain_timeout_s=30.0) as control:
        await control.work.start(JOB)
        await at_version_1(control, tmp_path)

        status = await control.scale(2)
        new = supervisor.servers[1]
        assert [s.state for s in status.servers] == ["serving", "serving"]
        assert supervisor.boxes[1].version == 1 == control.version  # caught up first...
        first_job = new.calls.index("start")
        assert new.calls.index("weights") < first_job  # ...then given work
        assert [s.job.groups_per_batch for s in supervisor.servers] == [2, 2]  # type: ignore[union-attr]

        produced = [group(1) for _ in range(3)]
        for g in produced:
            supervisor.boxes[1].put(g)
        control.fleet.sessions.bind("open-session", "s1")
        leased = await control.work.pull(PULL.model_copy(update={"num_groups": 1}), 1)

        removing = asyncio.create_task(control.scale(1))
        await asyncio.sleep(0.1)
        leaving = control.fleet.slots[1]
        assert leaving.state is SlotState.DRAINING and not removing.done()
        assert control.fleet.pick().name == "s0"  # no new work for it
        assert new.job is None and supervisor.servers[0].job.groups_per_batch == 4  # type: ignore[union-attr]
        assert control.fleet.sessions.find("open-session").server == "s1"  # still served

        rest = await control.work.pull(PULL, 1)  # the trainer takes what it buffered
        assert await control.work.ack([g.group_id for g in leased.groups + rest.groups]) == 3
        control.fleet.sessions.drop("open-session")  # the agent finished its episode
        status = await removing

        assert [s.name for s in status.servers] == ["s0"] and new.dead
        assert set(supervisor.boxes[1].states().values()) == {"acked"}  # nothing lost
        assert {g.group_id for g in produced} == set(supervisor.boxes[1].states())
        assert status.policy_version == 1 and status.servers[0].policy_version == 1


async def test_a_server_that_does_not_drain_in_time_keeps_its_groups_for_its_return(
    tmp_path,
) -> None:
    supervisor = FakeSupervisor(1)
    async with plane(tmp_path, supervisor, drain_timeout_s=0.3) as control:
        await control.scale(2)
        kept, leased = group(0), group(0)
        supervisor.boxes[1].put(kept)
        supervisor.boxes[1].put(leased)
        control.fleet.sessions.bind("open-session", "s1")
        taken = await control.work.pull(PULL.model_copy(update={"num_groups": 1}), 0)
        (lease,) = [g.group_id for g in taken.groups]

        await control.scale(1)  # nobody pulls or closes: it times out

        place = control.fleet.sessions.find("open-session")
        assert place is not None and place.owner is Owner.LOST
        with pytest.raises(ServerLost, match="removed from the cluster"):
            control.fleet.by_name("s1")  # what the router answers the session's calls
        assert await control.work.ack([lease]) == 1  # kept for the slot's return
        await control.scale(2)
        states = supervisor.boxes[1].states()  # the same data dir, reopened
        assert states[lease] == "acked"
        other = kept.group_id if lease == leased.group_id else leased.group_id
        assert states[other] == "ready"
        again = await control.work.pull(PULL, 0)
        assert [g.group_id for g in again.groups] == [other]


async def test_scale_stays_within_max_servers(tmp_path) -> None:
    supervisor = FakeSupervisor(1)
    async with plane(tmp_path, supervisor) as control:
        for wrong in (0, 3):
            with pytest.raises(InvalidRequest, match="servers must be 1 to 2"):
                await control.scale(wrong)
        assert len(control.fleet.slots) == 1


async def test_the_scale_route_adds_and_removes_servers_through_the_router(tmp_path) -> None:
    supervisor = FakeSupervisor(1)
    app = create_router(
        config(tmp_path, 1, max_servers=2, drain_timeout_s=5.0),
        supervisor=supervisor,
        connect=supervisor.connect,
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://router") as client:
            assert (await client.post(SCALE.path, json={"servers": 2})).status_code == 401
            grown = await client.post(SCALE.path, json={"servers": 2}, headers=ADMIN)
            assert grown.status_code == 200
            assert [s["state"] for s in grown.json()["servers"]] == ["serving", "serving"]
            made = await client.post("/v1/sessions", json={})
            session = made.json()["session_id"]
            home = made.headers[SERVER_HEADER]
            if home == "s0":  # the session on the server that leaves: made again there
                made = await client.post("/v1/sessions", json={})
                session, home = made.json()["session_id"], made.headers[SERVER_HEADER]
            assert home == "s1"
            await client.delete(f"/v1/sessions/{session}")  # the agent is done: s1 drains
            shrunk = await client.post(SCALE.path, json={"servers": 1}, headers=ADMIN)
            assert [s["name"] for s in shrunk.json()["servers"]] == ["s0"]
            lost = await client.post(f"/v1/sessions/{session}/step", json={"action": "x"})
            assert lost.status_code == 404  # closed before it left: forgotten, not lost
            bad = await client.post(SCALE.path, json={"servers": 0}, headers=ADMIN)
            assert bad.status_code == 422
