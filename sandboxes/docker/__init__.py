"""The Docker implementation: ``DockerSandboxPool``, a warm pool of hardened containers.

from rollgym.sandboxes.docker import DockerSandboxPool
with DockerSandboxPool(PoolConfig(size=8)) as pool:
    with pool.sandbox() as box:
        box.run_shell("echo hi")
"""

from __future__ import annotations

import docker

from ..config import PoolConfig
from ..metrics import MetricsSink
from ..pool import WarmPool
from .provider import DockerProvider


class DockerSandboxPool(WarmPool):
    """A ``WarmPool`` of Docker containers built from ``config.box``."""

    def __init__(
        self,
        config: PoolConfig | None = None,
        *,
        metrics: MetricsSink | None = None,
        client: docker.DockerClient | None = None,
    ) -> None:
        config = config or PoolConfig()
        provider = DockerProvider(config, metrics=metrics, client=client)
        super().__init__(provider, config, metrics=metrics)
        self.pool_id = provider.pool_id


__all__ = ["DockerProvider", "DockerSandboxPool"]
