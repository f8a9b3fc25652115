"""The cluster's rollout work and its one buffer: jobs split over servers, pulls, acks.

* **Jobs.** A rollout job goes to every server with a share of its ``groups_per_batch``
  (``routing.split_budget``) and of its seeds (``routing.split_seeds``): each server's
  admission gate then holds ``(max_staleness + 1) x share`` groups, and the shares add up
  to the window's capacity for the whole cluster, not N times it. The split is over all
  slots, so a server out of rotation leaves its share idle rather than doubling another's;
  when it rejoins it gets its share again. A job becomes the cluster's only once a server
  accepted it: a job every server refused (an env not allowed, bad kwargs) is answered
  with the refusal and the cluster keeps the job it had, so a server that restarts never
  fails to rejoin by replaying a job that no server would run.
* **Pulls.** The trainer's long-poll is served from every server's buffer: the router asks
  the servers in turn, without waiting (``timeout_s=0``) and only for what is still
  missing, until it has ``num_groups`` or the pull's time is up. No group is leased that
  the trainer did not ask for. The answer's version is the cluster's.
* **Acks** go back to the server that leased the group. If that server is out of rotation,
  the ack is kept and delivered before the server serves again (its buffer reopened the
  lease), so a group it had leased is never handed out twice.
* **Scaling.** A server that ``cluster scale`` is removing has no share (the others split
  the job), but its buffer is still pulled and its acks delivered until it is drained.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import time
import uuid
from collections.abc import Sequence

from rollgym.cluster.errors import ClusterError
from rollgym.cluster.fleet import Fleet, Slot, SlotState
from rollgym.cluster.routing import split_budget, split_seeds
from rollgym.contract.wire import (
    PullRequest,
    PullResponse,
    RolloutJob,
    RolloutStatus,
    TrajectoryGroup,
)

_PULL_POLL_S = 0.1  # between rounds of a pull that is still short of groups
_MAX_OWNERS = 1_000_000  # leased groups remembered for their acks (oldest forgotten first)


class ClusterWork:
    """See the module docstring."""

    def __init__(self, fleet: Fleet):
        self.fleet = fleet
        self.job: RolloutJob | None = None
        self._owners: collections.OrderedDict[str, str] = collections.OrderedDict()
        self._turns = itertools.count()

    # --- jobs ------------------------------------------------------------------------------

    def share_of(self, slot: Slot) -> RolloutJob | None:
        """``slot``'s part of the current job, or None (no job, or a zero share)."""
        if self.job is None:
            return None
        names = [s.name for s in self.fleet.slots if s.state is not SlotState.DRAINING]
        if slot.name not in names:
            return None
        shares = split_budget(self.job.groups_per_batch, names)
        if shares[slot.name] == 0:
            return None
        seeds = split_seeds(self.job.seeds, shares)[slot.name]
        return self.job.model_copy(update={"groups_per_batch": shares[slot.name], "seeds": seeds})

    async def start(self, job: RolloutJob) -> RolloutStatus:
        """Replace the job on every server in rotation (each with its share); kept as the
        cluster's job once a server accepted it, else the first refusal is raised."""
        previous, self.job = self.job, job
        answers = await asyncio.gather(
            *(self._start_on(slot) for slot in self.fleet.rotation()), return_exceptions=True
        )
        refusals = [a for a in answers if isinstance(a, BaseException)]
        if refusals and not any(a is True for a in answers):
            self.job = previous
        if refusals:
            raise refusals[0]
        return await self.status()

    async def _start_on(self, slot: Slot) -> bool:
        """Start ``slot``'s share (True), or stop it where its share is 0 (False)."""
        share = self.share_of(slot)
        if slot.api is None:
            return False
        if share is None:
            await slot.api.stop_rollouts(drain=False)
            return False
        await slot.api.start_rollouts(share)
        return True

    async def resume_on(self, slot: Slot) -> None:
        """A rejoining server: deliver the acks kept for it, then start its share."""
        if slot.api is None:
            return
        if slot.pending_acks:
            await slot.api.ack(sorted(slot.pending_acks))
            slot.pending_acks.clear()
        if self.job is not None:
            await self._start_on(slot)

    async def stop(self, drain: bool) -> RolloutStatus:
        self.job = None
        await asyncio.gather(
            *(s.api.stop_rollouts(drain) for s in self.fleet.rotation() if s.api is not None),
            return_exceptions=True,
        )
        return await self.status()

    async def status(self) -> RolloutStatus:
        """The servers' job statuses added up; the job is the cluster's."""
        rotation = [s for s in self.fleet.reachable() if s.api is not None]
        answers = await asyncio.gather(
            *(s.api.rollouts() for s in rotation if s.api is not None), return_exceptions=True
        )
        pairs = [
            (slot, a)
            for slot, a in zip(rotation, answers, strict=True)
            if isinstance(a, RolloutStatus)
        ]
        for slot, answer in pairs:
            slot.episodes = answer.in_flight
        statuses = [answer for _, answer in pairs]
        errors = [f"{slot.name}: {answer.error}" for slot, answer in pairs if answer.error]
        return RolloutStatus(
            running=any(s.running for s in statuses),
            job=self.job,
            in_flight=sum(s.in_flight for s in statuses),
            buffered_groups=sum(s.buffered_groups for s in statuses),
            completed_groups=sum(s.completed_groups for s in statuses),
            dropped_zero_variance=sum(s.dropped_zero_variance for s in statuses),
            invalid_trajectories=sum(s.invalid_trajectories for s in statuses),
            dropped_too_few_valid=sum(s.dropped_too_few_valid for s in statuses),
            dropped_stopped=sum(s.dropped_stopped for s in statuses),
            error="; ".join(errors) or None,
        )

    # --- the buffer ------------------------------------------------------------------------

    async def pull(self, request: PullRequest, version: int) -> PullResponse:
        """Complete groups from every server's buffer (see the module docstring)."""
        deadline = time.monotonic() + request.timeout_s
        groups: list[TrajectoryGroup] = []
        dropped = 0
        while True:
            rotation = self.fleet.reachable()  # a draining server's buffer too
            start = next(self._turns) % max(len(rotation), 1)
            for slot in rotation[start:] + rotation[:start]:
                missing = request.num_groups - len(groups)
                if missing <= 0 or slot.api is None:
                    continue
                asked = request.model_copy(update={"num_groups": missing, "timeout_s": 0.0})
                try:
                    answer = await slot.api.pull(asked)
                except ClusterError:
                    continue  # the health check takes it out of rotation
                for group in answer.groups:
                    self._remember(group.group_id, slot.name)
                groups.extend(answer.groups)
                dropped += answer.dropped_stale
            left = deadline - time.monotonic()
            if len(groups) >= request.num_groups or left <= 0:
                break
            await asyncio.sleep(min(_PULL_POLL_S, left))
        return PullResponse(
            lease_id=uuid.uuid4().hex if groups else None,
            groups=groups,
            dropped_stale=dropped,
            policy_version=version,
        )

    def _remember(self, group_id: str, server: str) -> None:
        self._owners[group_id] = server
        while len(self._owners) > _MAX_OWNERS:
            self._owners.popitem(last=False)

    async def ack(self, group_ids: Sequence[str]) -> int:
        """Ack each group at its server; kept for a server out of rotation (see above)."""
        by_server: dict[str, list[str]] = collections.defaultdict(list)
        unknown: list[str] = []
        for group_id in dict.fromkeys(group_ids):
            owner = self._owners.pop(group_id, None)
            (unknown if owner is None else by_server[owner]).append(group_id)
        calls = [self._ack_to(name, ids) for name, ids in by_server.items()]
        # An unknown id (a router restart forgot its owner): every server acks what it has.
        calls += [self._ack_on(slot, unknown) for slot in self.fleet.rotation() if unknown]
        return sum(await asyncio.gather(*calls))

    def leased_from(self, server: str) -> int:
        """Groups the trainer leased from ``server`` and has not acked yet."""
        return sum(owner == server for owner in self._owners.values())

    async def _ack_to(self, server: str, group_ids: list[str]) -> int:
        """Ack at ``server``; kept in ``retired_acks`` if ``cluster scale`` removed it."""
        index = int(server.removeprefix("s"))
        if index >= len(self.fleet.slots):
            self.fleet.retired_acks.setdefault(server, set()).update(group_ids)
            return len(group_ids)
        return await self._ack_on(self.fleet.slots[index], group_ids)

    async def _ack_on(self, slot: Slot, group_ids: list[str]) -> int:
        if slot.reachable and slot.api is not None:
            try:
                return await slot.api.ack(group_ids)
            except ClusterError:
                pass  # it is failing: keep the acks for its return
        slot.pending_acks.update(group_ids)
        return len(group_ids)
