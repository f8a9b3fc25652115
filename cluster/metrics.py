"""The router's own Prometheus metrics; ``/metrics`` adds every server's after them."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from rollgym.cluster.status import ClusterStatus

_FAST = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class RouterMetrics:
    """One registry per router (no process-global state)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.version = Gauge(
            "rollgym_cluster_policy_version", "the cluster's policy version", registry=self.registry
        )
        self.servers = Gauge(
            "rollgym_cluster_servers", "servers by state", ["state"], registry=self.registry
        )
        self.restarts = Gauge(
            "rollgym_cluster_server_restarts",
            "restarts per server",
            ["server"],
            registry=self.registry,
        )
        self.fanout = Histogram(
            "rollgym_cluster_weight_fanout_seconds",
            "a weight update to every server: stage excluded, all applied",
            buckets=_FAST,
            registry=self.registry,
        )
        self.forwarded = Histogram(
            "rollgym_router_upstream_seconds",
            "forwarded calls: the server's answer as the router waited for it",
            ["route"],
            buckets=_FAST,
            registry=self.registry,
        )
        self.lost = Counter(
            "rollgym_router_lost_calls",
            "calls answered server_lost (their server died)",
            registry=self.registry,
        )

    def render(self, status: ClusterStatus) -> str:
        self.version.set(status.policy_version)
        for state in ("starting", "serving", "recovering", "failed"):
            self.servers.labels(state=state).set(sum(s.state == state for s in status.servers))
        for server in status.servers:
            self.restarts.labels(server=server.name).set(server.restarts)
        return generate_latest(self.registry).decode()
