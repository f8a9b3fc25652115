"""The control plane with fake servers: rotation, one version, recovery, the one buffer."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cluster_fakes import FakeBox, FakeSupervisor, config, group

from rollgym.cluster.control import ControlPlane
from rollgym.cluster.errors import FanoutFailed, ServerAnswered
from rollgym.cluster.fleet import SlotState
from rollgym.cluster.weights import WeightStore
from rollgym.contract.wire import NcclInit, NcclUpdate, PullRequest, RolloutJob


@contextlib.asynccontextmanager
async def plane(
    tmp_path: Path, supervisor: FakeSupervisor, **kwargs: object
) -> AsyncIterator[ControlPlane]:
    cfg = config(tmp_path, servers=len(supervisor.boxes), **kwargs)
    store = WeightStore(cfg.weights_dir, max_bytes=1 << 20)
    async with ControlPlane(cfg, supervisor, store, supervisor.connect) as control:
        yield control
    assert supervisor.stopped


async def staged(control: ControlPlane, tmp_path: Path, name: str = "w.safetensors"):
    source = tmp_path / name
    source.write_bytes(b"weights")
    return control.store.stage_path(source)


async def until(predicate, timeout_s: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_servers_join_the_rotation_at_one_version(tmp_path) -> None:
    supervisor = FakeSupervisor(2)
    async with plane(tmp_path, supervisor) as control:
        assert supervisor.started
        assert [s.state for s in control.fleet.slots] == [SlotState.SERVING] * 2
        assert control.version == 0


async def test_a_server_that_crashes_while_starting_is_followed_to_its_restart(tmp_path) -> None:
    supervisor = FakeSupervisor(2)
    supervisor.servers[1].crash_on_health = True
    async with plane(tmp_path, supervisor) as control:
        slot = control.fleet.slots[1]
        assert slot.state is SlotState.SERVING and slot.restarts == 1
        assert slot.api is supervisor.servers[1] and not supervisor.servers[1].dead


async def test_an_update_reaches_every_server_from_one_staged_copy(tmp_path) -> None:
    supervisor = FakeSupervisor(2)
    async with plane(tmp_path, supervisor) as control:
        result = await control.update(await staged(control, tmp_path), expected=0)
        assert result.policy_version == control.version == 1
        assert [b.version for b in supervisor.boxes] == [1, 1]
        folders = {path for s in supervisor.servers for path in s.loaded}
        assert len(folders) == 1  # one file on one box, loaded by both
        current = control.store.current()
        assert current is not None and current[1] == 1


async def test_across_machines_each_server_is_sent_the_staged_file(tmp_path) -> None:
    supervisor = FakeSupervisor(2)
    async with plane(tmp_path, supervisor, weights_transport="http") as control:
        await control.update(await staged(control, tmp_path), expected=0)
        sent = [s.loaded for s in supervisor.servers]
        assert sent[0] == sent[1] and sent[0][0].name == "w.safetensors"  # the file, uploaded
        (tmp_path / "ckpt").mkdir()
        for name in ("a.safetensors", "b.safetensors"):
            (tmp_path / "ckpt" / name).write_bytes(b"x")
        with pytest.raises(ServerAnswered, match="one safetensors file"):
            await control.update(control.store.stage_path(tmp_path / "ckpt"), expected=1)
        assert control.version == 1


async def test_auto_uploads_only_to_servers_on_another_node(tmp_path) -> None:
    supervisor = FakeSupervisor(2)
    supervisor.node_of[1] = "node-2"  # s1 does not share the router's file system
    async with plane(tmp_path, supervisor) as control:
        copy = await staged(control, tmp_path)
        await control.update(copy, expected=0)
        local, remote = (s.loaded for s in supervisor.servers)
        assert local == [copy.folder] and remote == [copy.files[0]]  # a path, then the file
        status = control.status()
        assert [(s.node, s.weights_by) for s in status.servers] == [
            ("node-router", "shared_file"),
            ("node-2", "http"),
        ]
        nodes = {n.node_id: (n.servers, n.router) for n in status.nodes}
        assert nodes == {"node-router": (["s0"], True), "node-2": (["s1"], False)}
        assert "node-2" in status.table()


async def test_a_restart_on_another_node_with_the_same_pid_is_a_new_process(tmp_path) -> None:
    """Containers number their processes alike: (node, pid) names a process, not the pid."""
    supervisor = FakeSupervisor(2)
    async with plane(tmp_path, supervisor) as control:
        slot = control.fleet.slots[1]
        pid = supervisor.pids[1]
        restart = supervisor.restart

        async def same_pid_elsewhere(index: int) -> None:
            await restart(index)
            supervisor.pids[index], supervisor.node_of[index] = pid, "node-3"

        supervisor.restart = same_pid_elsewhere  # type: ignore[method-assign]
        supervisor.kill(1)
        await until(lambda: slot.restarts == 1 and slot.state is SlotState.SERVING)
        assert (slot.node, slot.pid) == ("node-3", pid)
        assert slot.api is supervisor.servers[1]  # the new incarnation, not the dead one
        await control.update(await staged(control, tmp_path), expected=0)
        assert supervisor.servers[1].loaded  # reached over http: it is on another node
        assert supervisor.servers[1].loaded[0].suffix == ".safetensors"


async def test_a_stale_expected_version_is_refused_before_any_server_is_touched(tmp_path) -> None:
    supervisor = FakeSupervisor(2)
    async with plane(tmp_path, supervisor) as control:
        with pytest.raises(ServerAnswered) as refused:
            await control.update(await staged(control, tmp_path), expected=5)
        assert refused.value.status == 409
        assert all(not s.loaded for s in supervisor.servers)


async def test_weights_every_server_refuses_go_back_to_the_caller(tmp_path) -> None:
    supervisor = FakeSupervisor(2)
    async with plane(tmp_path, supervisor) as control:
        for server in supervisor.servers:
            server.fail_updates = 400
        with pytest.raises(ServerAnswered) as refused:
            await control.update(await staged(control, tmp_path), expected=0)
        assert refused.value.status == 400
        assert control.version == 0
        assert [s.state for s in control.fleet.slots] == [SlotState.SERVING] * 2
        assert control.store.current() is None


async def test_a_server_that_fails_an_update_is_restarted_and_caught_up(tmp_path) -> None:
    supervisor = FakeSupervisor(2)
    async with plane(tmp_path, supervisor) as control:
        supervisor.servers[1].fail_updates = 503
        await control.update(await staged(control, tmp_path), expected=0)
        assert control.version == 1
        await until(lambda: control.fleet.slots[1].state is SlotState.SERVING)
        assert supervisor.restarted == [1]
        assert supervisor.boxes[1].version == 1  # caught up from the store
        assert control.fleet.slots[1].restarts == 1


async def test_a_dead_server_leaves_the_rotation_then_rejoins_caught_up(tmp_path) -> None:
    supervisor = FakeSupervisor(2)
    async with plane(tmp_path, supervisor) as control:
        control.fleet.sessions.bind("sess", "s1")
        supervisor.kill(1)
        box = supervisor.boxes[1]
        slot = control.fleet.slots[1]
        await until(lambda: slot.restarts == 1 and slot.state is SlotState.SERVING)
        assert control.fleet.sessions.find("sess").owner.value == "lost"  # type: ignore[union-attr]
        assert supervisor.servers[1].box is box  # the restart reopened the same buffer


async def test_no_rotation_means_no_update(tmp_path) -> None:
    supervisor = FakeSupervisor(1)
    async with plane(tmp_path, supervisor) as control:
        control.fleet.slots[0].state = SlotState.RECOVERING
        with pytest.raises(FanoutFailed):
            await control.update(await staged(control, tmp_path), expected=0)


async def test_a_restarted_cluster_resumes_at_its_servers_version(tmp_path) -> None:
    # s0 came back at version 2 from its volume; s1 lost its volume and is at 0.
    supervisor = FakeSupervisor(2, boxes=[FakeBox(version=2), FakeBox(version=0)])
    store = WeightStore(tmp_path / "weights", max_bytes=1 << 20)
    (tmp_path / "v2.safetensors").write_bytes(b"v2")
    store.commit(store.stage_path(tmp_path / "v2.safetensors"), version=2)
    async with plane(tmp_path, supervisor) as control:
        assert control.version == 2
        assert [b.version for b in supervisor.boxes] == [2, 2]
        assert len(supervisor.servers[1].loaded) == 2  # two steps of the same weights


async def test_a_server_behind_with_no_weights_to_catch_up_fails_clearly(tmp_path) -> None:
    supervisor = FakeSupervisor(2, boxes=[FakeBox(version=1), FakeBox(version=0)])
    async with plane(tmp_path, supervisor) as control:
        slot = control.fleet.slots[1]
        assert slot.state is SlotState.FAILED
        assert "no copy of version 1" in (slot.reason or "")


async def test_nccl_ranks_go_one_per_server_and_nothing_is_staged(tmp_path) -> None:
    supervisor = FakeSupervisor(2)
    async with plane(tmp_path, supervisor) as control:
        init = NcclInit(master_address="trainer", master_port=29500, rank_offset=1, world_size=3)
        await control.nccl_init(init)
        assert [s.nccl_rank for s in supervisor.servers] == [1, 2]
        announced = NcclUpdate(names=["w"], dtype_names=["float32"], shapes=[[2]])
        assert (await control.update_nccl(announced)).policy_version == 1
        assert [b.version for b in supervisor.boxes] == [1, 1]
        assert control.store.current() is None  # a broadcast leaves no copy to catch up from
        supervisor.boxes[1].version = 0  # its volume is lost with it: it comes back at 0
        supervisor.kill(1)
        slot = control.fleet.slots[1]
        await until(lambda: slot.state is SlotState.FAILED)
        assert slot.reason is not None and "no copy of version 1" in slot.reason


def job(**kwargs: object) -> RolloutJob:
    return RolloutJob(env_id="e", groups_per_batch=4, max_staleness=1, **kwargs)  # type: ignore[arg-type]


async def test_a_job_is_split_so_the_window_holds_for_the_cluster(tmp_path) -> None:
    supervisor = FakeSupervisor(2)
    async with plane(tmp_path, supervisor) as control:
        status = await control.work.start(job(seeds=list(range(6))))
        shares = [s.job.groups_per_batch for s in supervisor.servers]  # type: ignore[union-attr]
        assert shares == [2, 2] and status.job == job(seeds=list(range(6)))
        assert [s.job.seeds for s in supervisor.servers] == [[0, 2, 4], [1, 3, 5]]  # type: ignore[union-attr]
        await control.work.stop(drain=False)
        assert all(s.job is None for s in supervisor.servers)


async def test_a_rejoining_server_gets_its_share_of_the_job_again(tmp_path) -> None:
    supervisor = FakeSupervisor(2)
    async with plane(tmp_path, supervisor) as control:
        await control.work.start(job())
        supervisor.kill(0)
        slot = control.fleet.slots[0]
        await until(lambda: slot.restarts == 1 and slot.state is SlotState.SERVING)
        assert supervisor.servers[0].job is not None
        assert supervisor.servers[0].job.groups_per_batch == 2


async def test_a_pull_takes_from_every_buffer_and_never_more_than_asked(tmp_path) -> None:
    supervisor = FakeSupervisor(2)
    for box in supervisor.boxes:
        for _ in range(3):
            box.put(group(0))
    async with plane(tmp_path, supervisor) as control:
        request = PullRequest(trainer_version=0, max_staleness=1, num_groups=4, timeout_s=0)
        answer = await control.work.pull(request, control.version)
        assert len(answer.groups) == 4
        leased = [sum(s == "leased" for s in b.states().values()) for b in supervisor.boxes]
        assert sum(leased) == 4 and min(leased) >= 1
        assert await control.work.ack([g.group_id for g in answer.groups]) == 4
        acked = [sum(s == "acked" for s in b.states().values()) for b in supervisor.boxes]
        assert acked == leased


async def test_a_pull_waits_for_groups_until_its_time_is_up(tmp_path) -> None:
    supervisor = FakeSupervisor(2)
    async with plane(tmp_path, supervisor) as control:
        request = PullRequest(trainer_version=0, max_staleness=1, num_groups=1, timeout_s=2)
        pulling = asyncio.create_task(control.work.pull(request, 0))
        await asyncio.sleep(0.2)
        supervisor.boxes[1].put(group(0))
        answer = await pulling
        assert len(answer.groups) == 1 and answer.lease_id is not None


async def test_acks_for_a_dead_server_are_delivered_before_it_serves_again(tmp_path) -> None:
    supervisor = FakeSupervisor(2)
    g = group(0)
    supervisor.boxes[1].put(g)
    async with plane(tmp_path, supervisor) as control:
        request = PullRequest(trainer_version=0, max_staleness=1, num_groups=1, timeout_s=0)
        answer = await control.work.pull(request, 0)
        assert [x.group_id for x in answer.groups] == [g.group_id]
        control.fleet.slots[1].state = SlotState.RECOVERING  # out of rotation, as it dies
        supervisor.kill(1)
        assert await control.work.ack([g.group_id]) == 1  # kept for it
        assert supervisor.boxes[1].states()[g.group_id] == "leased"
        control.fleet.slots[1].state = SlotState.SERVING
        control.evict(control.fleet.slots[1], "test")
        slot = control.fleet.slots[1]
        await until(lambda: slot.restarts == 1 and slot.state is SlotState.SERVING)
        assert supervisor.boxes[1].states()[g.group_id] == "acked"


async def test_a_job_every_server_refused_is_not_kept_so_a_restart_rejoins(tmp_path) -> None:
    """Attack (issue 34): a job every server refuses (an env they do not allow) used to
    become the cluster's job anyway; a server that restarted then failed to rejoin,
    replaying it, and the cluster ran on the others until someone deleted the job."""
    supervisor = FakeSupervisor(2)
    for box in supervisor.boxes:
        box.forbidden_envs.add("forbidden")
    async with plane(tmp_path, supervisor) as control:
        await control.work.start(job())
        with pytest.raises(ServerAnswered) as refused:
            await control.work.start(job().model_copy(update={"env_id": "forbidden"}))
        assert refused.value.status == 403
        assert control.work.job == job()  # the job the servers run stays the cluster's
        supervisor.kill(0)
        slot = control.fleet.slots[0]
        await until(lambda: slot.restarts == 1 and slot.state is SlotState.SERVING)
        assert supervisor.servers[0].job is not None and supervisor.servers[0].job.env_id == "e"
