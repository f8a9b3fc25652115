"""``GET /admin/cluster``: the cluster as ``rollgym cluster status`` prints it.

The router's own routes, declared as the server's are (``rollgym.contract.api``):
``STATUS`` reads the cluster, ``SCALE`` adds or removes servers (``rollgym cluster scale
N``; it answers once they are up or gone), ``DOWN`` stops every server, Ray, then the
router.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from rollgym.contract.api import Route


class ServerStatus(BaseModel):
    name: str
    state: str = Field(description="starting, serving, recovering, failed or draining")
    url: str | None
    pid: int | None
    policy_version: int | None
    restarts: int
    sessions: int = Field(description="open sessions it holds")
    in_flight: int = Field(description="calls the router forwarded that have not answered")
    episodes: int = Field(description="its rollout job's episodes in flight, last check")
    share: int = Field(description="its share of the job's groups per batch")
    reason: str | None = Field(None, description="why it is not serving")
    node: str | None = Field(None, description="the Ray node it runs on (id)")
    weights_by: str | None = Field(None, description="how weights reach it: shared_file, http")


class NodeStatus(BaseModel):
    node_id: str
    address: str
    alive: bool = Field(
        description="false: Ray lost it (its servers restart where Ray finds room, on it "
        "again once it returns)"
    )
    cpus: float
    router: bool = Field(description="the router's own node (shares its file system)")
    servers: list[str] = Field(description="the servers running on it")


class ClusterStatus(BaseModel):
    policy_version: int
    updating: bool
    servers: list[ServerStatus]
    weights_transport: str
    nodes: list[NodeStatus] = Field(default_factory=list)

    def table(self) -> str:
        """A fixed-width table for the terminal."""
        head = f"{'server':<7}{'state':<12}{'version':>8}{'restarts':>9}{'sessions':>9}"
        head += f"{'episodes':>9}{'share':>6}  {'node':<10}url / reason"
        rows = [
            f"{s.name:<7}{s.state:<12}{_num(s.policy_version):>8}{s.restarts:>9}{s.sessions:>9}"
            f"{s.episodes:>9}{s.share:>6}  {(s.node or '-')[:8]:<10}{s.reason or s.url or ''}"
            for s in self.servers
        ]
        if self.nodes:
            rows += ["", f"{'node':<10}{'address':<17}{'state':<7}{'cpus':>5}  servers"]
            rows += [
                f"{n.node_id[:8]:<10}{n.address:<17}{'alive' if n.alive else 'lost':<7}"
                f"{n.cpus:>5g}  {' '.join(n.servers) or '-'}{'  (router)' if n.router else ''}"
                for n in self.nodes
            ]
        serving = sum(s.state == "serving" for s in self.servers)
        title = (
            f"policy version {self.policy_version}{' (updating)' if self.updating else ''}; "
            f"{serving}/{len(self.servers)} servers serving; weights by {self.weights_transport}"
        )
        return "\n".join([title, head, *rows])


def _num(value: int | None) -> str:
    return "-" if value is None else str(value)


class ScaleRequest(BaseModel):
    """``POST /admin/cluster/scale``: how many servers the cluster should have."""

    model_config = ConfigDict(extra="forbid")

    servers: int = Field(ge=1, le=256, description="servers wanted; the last ones are removed")


STATUS = Route("GET", "/admin/cluster", None, ClusterStatus, auth="admin")
SCALE = Route("POST", "/admin/cluster/scale", ScaleRequest, ClusterStatus, auth="admin")
DOWN = Route("POST", "/admin/cluster/down", None, ClusterStatus, auth="admin")
