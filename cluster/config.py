"""``ClusterConfig``: what ``rollgym cluster up`` runs, validated once.

Servers are configured like one ``rollgym serve``: every ``ROLLGYM_*`` variable of the
``cluster up`` process reaches each server (engine, buffer, sandboxes...), except the few
the cluster sets per server: its host, its port (any free one) and its data dir
(``<data_dir>/server-<i>``, reopened by a restart). The router takes ``host``/``port``.

    ROLLGYM_CLUSTER__SERVERS=2  ROLLGYM_CLUSTER__RAY_ADDRESS=ray://head:10001
    ROLLGYM_CLUSTER__CPUS_PER_SERVER=1  ROLLGYM_CLUSTER__MAX_RESTARTS=3
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from rollgym.contract import paths
from rollgym.server.http.auth import AdminToken


class ClusterConfig(BaseSettings):
    """See the module docstring; flags override ``ROLLGYM_CLUSTER__*`` over defaults."""

    model_config = SettingsConfigDict(
        env_prefix="ROLLGYM_CLUSTER__", extra="forbid", frozen=True, validate_default=True
    )

    servers: int = Field(2, ge=1, le=256, description="rollout servers, one engine each")
    max_servers: int | None = Field(
        None,
        ge=1,
        le=256,
        description="the most servers `cluster scale` may reach (a local Ray is sized for "
        "them); default: servers",
    )
    drain_timeout_s: float = Field(
        300.0,
        gt=0,
        description="a server being removed waits this long for its sessions to close and "
        "its buffer to be pulled and acked; then its open sessions are lost",
    )
    ray_address: str | None = Field(
        None, description="an existing Ray cluster (ray.init address); default: start a local one"
    )
    host: str = Field("127.0.0.1", description="the router's bind address")
    port: int = Field(8000, ge=0, le=65535, description="the router's port (0: any)")
    admin_token: AdminToken = Field(
        description="the router's and the servers' (``cluster up`` reads ROLLGYM_ADMIN_TOKEN)"
    )
    data_dir: Path = Field(
        default_factory=lambda: paths.data_home() / "cluster",
        description="server-<i>/ (each server's buffer, reopened on restart) and weights/",
    )
    server_host: str | None = Field(
        None, description="where servers listen; default 127.0.0.1 locally, the node's IP on Ray"
    )
    cpus_per_server: float = Field(1.0, gt=0, description="Ray resource: CPUs per server")
    gpus_per_server: float = Field(0.0, ge=0, description="Ray resource: GPUs per server")
    memory_per_server_gib: float = Field(3.0, gt=0, description="Ray resource: memory")
    max_restarts: int = Field(3, ge=0, description="Ray restarts a dead server this often")
    local_cpus: int | None = Field(
        None, ge=1, description="CPUs of a local Ray cluster (default: what the servers need)"
    )
    object_store_mib: int = Field(
        80, ge=75, description="a local Ray cluster's object store (rollgym puts nothing there)"
    )
    weights_transport: Literal["auto", "shared_file", "http"] = Field(
        "auto",
        description="shared_file: every server loads one staged file (one box or a shared "
        "volume); http: the router uploads the file to each server; auto: shared_file to "
        "the servers on the router's own Ray node, http to those on other nodes",
    )
    placement: Literal["default", "spread"] = Field(
        "default",
        description="Ray's scheduling strategy for the servers: default packs them on few "
        "nodes, spread puts them on as many nodes as it can",
    )
    health_interval_s: float = Field(1.0, gt=0, description="how often servers are checked")
    start_timeout_s: float = Field(900.0, gt=0, description="a server's start, restart included")
    request_timeout_s: float = Field(600.0, gt=0, description="a call forwarded to a server")

    @property
    def servers_limit(self) -> int:
        return max(self.servers, self.max_servers or self.servers)

    def server_dir(self, slot: int) -> Path:
        return self.data_dir / f"server-{slot}"

    @property
    def weights_dir(self) -> Path:
        return self.data_dir / "weights"
