"""The Docker implementation: ``DockerSandboxPool``, a warm pool of hardened containers, and
``DockerImagePool``, warm boxes of many images under one cap.

from rollgym.sandboxes.docker import DockerSandboxPool
with DockerSandboxPool(PoolConfig(size=8)) as pool:
    with pool.sandbox() as box:
        box.run_shell("echo hi")
"""

from __future__ import annotations

import threading

import docker

from ..config import ImagePoolConfig, PoolConfig
from ..image_pool import ImagePool
from ..metrics import MetricsSink
from ..pool import WarmPool
from .engine import engine_client
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


class DockerImagePool(ImagePool):
    """An ``ImagePool`` of Docker containers: one provider per kind of box, one client."""

    def __init__(
        self,
        config: ImagePoolConfig | None = None,
        *,
        metrics: MetricsSink | None = None,
        client: docker.DockerClient | None = None,
    ) -> None:
        self._client = client
        self._own_client = client is None
        self._client_lock = threading.Lock()

        def provider_for(pool_config: PoolConfig) -> DockerProvider:
            return DockerProvider(pool_config, metrics=metrics, client=self._shared_client())

        super().__init__(provider_for, config, metrics=metrics)

    def _shared_client(self) -> docker.DockerClient:
        with self._client_lock:
            if self._client is None:
                self._client = engine_client(self.config.remote)
            return self._client

    def close(self) -> None:
        super().close()
        client, self._client = self._client, None
        if client is not None and self._own_client:
            client.close()


__all__ = ["DockerImagePool", "DockerProvider", "DockerSandboxPool"]
