"""Routes as the contract declares them (``rollgym.contract.api``), on a FastAPI router.

    @declared(router, api.PULL)
    async def pull(body: PullRequest, services: ServicesDep) -> Response: ...

is ``router.post("/admin/buffer/pull", response_model=PullResponse)``, with the method, path,
status and answer model read from the declaration: the server and the cluster's router
serve the same routes the clients call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import APIRouter

from rollgym.contract.api import Route

F = TypeVar("F", bound=Callable[..., Any])


def declared(router: APIRouter, route: Route[Any], **options: Any) -> Callable[[F], F]:
    """FastAPI's decorator for ``route``; ``options`` are FastAPI's (``include_in_schema``)."""
    return router.api_route(
        route.path,
        methods=[route.method],
        status_code=route.status,
        response_model=route.answer,
        **options,
    )
