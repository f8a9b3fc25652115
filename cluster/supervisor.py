"""Starting, finding and restarting the servers: Ray does it, behind a small seam.

``Supervisor`` is what the control plane needs: start N servers, find where server ``i``
answers now (after a restart: the new process's port and node), force a restart of a
server that is alive but broken, list the Ray cluster's nodes, stop everything.
``RaySupervisor`` runs each server as a ``ServerHost`` actor with declared resources
(CPUs, GPUs, memory), ``max_restarts`` and a scheduling strategy (``placement``): Ray
places them, on any of its nodes, and restarts them; rollgym schedules nothing itself. A local Ray cluster
(no ``ray_address``) is started small (the servers' CPUs, an 80 MiB object store, no
dashboard) and belongs to this process: ``stop`` shuts it down (if this process is killed,
Ray's reaper ends most of it; docs/cluster.md says what is left).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import rollgym
from rollgym.cluster.actor import ServerHost, Whereabouts
from rollgym.cluster.config import ClusterConfig
from rollgym.cluster.errors import ServerUnreachable

# Set by the cluster for each server; every other ROLLGYM_* variable passes through.
_PER_SERVER = ("ROLLGYM_HOST", "ROLLGYM_PORT", "ROLLGYM_DATA_DIR")
# vLLM on CPU: a fixed KV-cache budget, the engine core in the server's process.
ENGINE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
_RETRY_S = 0.5


@dataclasses.dataclass(frozen=True)
class Node:
    """One node of the Ray cluster as Ray reports it (a lost one stays, not alive)."""

    node_id: str
    address: str
    alive: bool
    cpus: float


class Supervisor(Protocol):
    local_node: str  # the router's own node: its servers share its file system

    async def start(self) -> None: ...

    async def nodes(self) -> list[Node]:
        """The cluster's nodes, joined and lost."""
        ...

    async def locate(self, slot: int, timeout_s: float) -> Whereabouts:
        """Where server ``slot`` answers now; waits while it is (re)starting."""
        ...

    async def restart(self, slot: int) -> None: ...

    async def add(self, slot: int) -> None:
        """Start server ``slot``, the next one (``cluster scale``)."""
        ...

    async def remove(self, slot: int, timeout_s: float) -> None:
        """Stop server ``slot``, the last one, for good (it is not restarted)."""
        ...

    async def stop(self, timeout_s: float) -> None: ...


def server_env(config: ClusterConfig, slot: int, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of server ``slot``: the caller's ROLLGYM_* and engine variables,
    the slot's data dir, and ``PYTHONPATH`` so a worker imports this very rollgym."""
    source_root = str(Path(rollgym.__file__).resolve().parent.parent)
    passed = {
        k: v
        for k, v in environ.items()
        if (k.startswith(("ROLLGYM_", "VLLM_", "OMP_")) and not k.startswith("ROLLGYM_CLUSTER__"))
        and k not in _PER_SERVER
    }
    path = os.pathsep.join(p for p in (source_root, environ.get("PYTHONPATH", "")) if p)
    return {
        **ENGINE_ENV,
        **passed,
        "ROLLGYM_ADMIN_TOKEN": config.admin_token.get_secret_value(),
        "ROLLGYM_DATA_DIR": str(config.server_dir(slot)),
        "PYTHONPATH": path,
    }


class RaySupervisor:
    """See the module docstring."""

    namespace = "rollgym"

    def __init__(self, config: ClusterConfig, environ: Mapping[str, str] | None = None):
        self.config = config
        self._environ = dict(os.environ if environ is None else environ)
        self._actors: list[Any] = []
        self._owns_ray = False
        self._host: str | None = None
        self.local_node = ""

    async def start(self) -> None:
        await asyncio.to_thread(self._start)

    def _start(self) -> None:
        import ray

        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        c = self.config
        if c.ray_address is not None:
            ray.init(address=c.ray_address, namespace=self.namespace, log_to_driver=False)
        else:
            cpus = c.local_cpus or max(math.ceil(c.servers_limit * c.cpus_per_server), 1)
            ray.init(
                num_cpus=cpus,
                num_gpus=math.ceil(c.servers_limit * c.gpus_per_server),
                object_store_memory=c.object_store_mib << 20,
                include_dashboard=False,
                log_to_driver=False,
                namespace=self.namespace,
            )
            self._owns_ray = True
        self.local_node = ray.get_runtime_context().get_node_id()
        # Locally, loopback; on a Ray cluster, each server listens on its own node's address.
        self._host = c.server_host or ("127.0.0.1" if self._owns_ray else None)
        for slot in range(c.servers):
            self._spawn(slot)

    def _spawn(self, slot: int) -> None:
        import ray

        c = self.config
        c.server_dir(slot).mkdir(parents=True, exist_ok=True)
        options = {
            "scheduling_strategy": "SPREAD" if c.placement == "spread" else "DEFAULT",
            "num_cpus": c.cpus_per_server,
            "num_gpus": c.gpus_per_server,
            "memory": int(c.memory_per_server_gib * (1 << 30)),
            "max_restarts": c.max_restarts,
            "max_task_retries": 0,  # a call a dying server took fails; it is not re-run
            "runtime_env": {"env_vars": server_env(c, slot, self._environ)},
        }
        self._actors.append(ray.remote(ServerHost).options(**options).remote(self._host))

    async def add(self, slot: int) -> None:
        if slot != len(self._actors):
            raise ValueError(f"server {slot} is not the next one ({len(self._actors)})")
        await asyncio.to_thread(self._spawn, slot)

    async def remove(self, slot: int, timeout_s: float) -> None:
        if slot != len(self._actors) - 1:
            raise ValueError(f"server {slot} is not the last one ({len(self._actors) - 1})")
        await asyncio.to_thread(_retire, self._actors.pop(), timeout_s)

    async def locate(self, slot: int, timeout_s: float) -> Whereabouts:
        """Ask the actor where it answers; retried while Ray restarts it, until ``timeout_s``."""
        from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            try:
                ref = self._actors[slot].where.remote()
                return await asyncio.wait_for(asyncio.wrap_future(ref.future()), max(left, 0.1))
            except ActorDiedError as exc:
                if not _restartable(exc):
                    raise ServerUnreachable(f"server {slot} is gone for good: {exc}") from exc
            except (RayActorError, ActorUnavailableError, TimeoutError):
                pass  # restarting, or still starting: ask again
            if time.monotonic() >= deadline:
                raise ServerUnreachable(f"server {slot} did not come back in {timeout_s:.0f} s")
            await asyncio.sleep(_RETRY_S)

    async def nodes(self) -> list[Node]:
        import ray

        found = await asyncio.to_thread(ray.nodes)
        return [
            Node(
                node_id=n["NodeID"],
                address=n["NodeManagerAddress"],
                alive=bool(n["Alive"]),
                cpus=float(n.get("Resources", {}).get("CPU", 0.0)),
            )
            for n in found
        ]

    async def restart(self, slot: int) -> None:
        import ray

        await asyncio.to_thread(ray.kill, self._actors[slot], no_restart=False)

    async def stop(self, timeout_s: float) -> None:
        await asyncio.to_thread(self._stop, timeout_s)

    def _stop(self, timeout_s: float) -> None:
        import ray

        if not ray.is_initialized():
            return
        stops = [actor.stop.remote(timeout_s) for actor in self._actors]
        try:
            ray.wait(stops, num_returns=len(stops), timeout=timeout_s + 5)
        finally:
            for actor in self._actors:
                ray.kill(actor, no_restart=True)
            self._actors = []
            ray.shutdown()


def _retire(actor: Any, timeout_s: float) -> None:
    """Stop one server as ``stop`` stops them all, then end its actor for good."""
    import ray

    try:
        ray.wait([actor.stop.remote(timeout_s)], timeout=timeout_s + 5)
    finally:
        ray.kill(actor, no_restart=True)


def _restartable(exc: BaseException) -> bool:
    """Ray says an actor died for good (no restarts left, or killed with no_restart)."""
    text = str(exc)
    return not ("no_restart" in text or "will not be restarted" in text)
