"""A pool of one kind of box, out of the pool an env was given.

Envs whose tasks need boxes of their own kind (a Harbor task's image, a data set's
verifier folders) get them from a pool of many kinds (``sandboxes.image_pool.ImagePool``,
what the server makes with ``ROLLGYM_SANDBOXES__MAX_BOXES``): ``kind_pool(pool, box)`` is
that kind's ``SandboxPool``. A pool of one image cannot serve another kind: that is an
``InfraError`` that says how to get the right pool (the operator's setting, never the
agent's doing).
"""

from __future__ import annotations

from rollgym.envs.errors import InfraError
from rollgym.envs.pool_handle import PoolHandle
from rollgym.sandboxes.base import SandboxPool
from rollgym.sandboxes.config import SandboxConfig


def kind_pool(pool: SandboxPool, box: SandboxConfig, *, needed_by: str) -> SandboxPool:
    """The ``SandboxPool`` of ``box``'s kind in ``pool`` (unwrapping a ``PoolHandle``)."""
    inner = pool.pool if isinstance(pool, PoolHandle) else pool
    for_box = getattr(inner, "for_box", None)
    if for_box is None:
        raise InfraError(
            f"{type(inner).__name__} serves boxes of one image; {needed_by} need a pool of "
            "boxes per image (sandboxes.image_pool.ImagePool; the server makes one when "
            "ROLLGYM_SANDBOXES__MAX_BOXES is set)"
        )
    view: SandboxPool = for_box(box)
    return view


def default_kinds_pool() -> SandboxPool:
    """A small Docker ``ImagePool`` for an env made without ``sandbox_pool`` (4 boxes)."""
    from rollgym.sandboxes.config import ImagePoolConfig
    from rollgym.sandboxes.docker import DockerImagePool  # Docker only when it is needed

    pool = DockerImagePool(ImagePoolConfig(max_boxes=4))
    pool.start()
    return pool
