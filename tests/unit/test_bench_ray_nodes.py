"""``bench.ray_nodes.bridge_gateway``: the host's address on Docker's bridge, from what the
engine lists (the real twin: tests/e2e/test_cluster_nodes_e2e.py, on this machine's engine)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bench.ray_nodes import bridge_gateway


def engine_listing(config: dict[str, str]) -> SimpleNamespace:
    bridge = SimpleNamespace(attrs={"IPAM": {"Config": [config]}})
    return SimpleNamespace(networks=SimpleNamespace(get=lambda name: bridge))


@pytest.mark.parametrize(
    ("config", "gateway"),
    [
        ({"Subnet": "172.17.0.0/16", "Gateway": "172.17.0.1"}, "172.17.0.1"),
        ({"Subnet": "10.99.0.0/24"}, "10.99.0.1"),  # an engine that lists the subnet alone
    ],
)
def test_the_gateway_is_listed_or_the_subnets_first_address(config, gateway) -> None:
    assert bridge_gateway(engine_listing(config)) == gateway  # type: ignore[arg-type]
