"""The admin token, checked one way by the server and by the cluster's router.

``AdminToken`` is the settings' field (``ROLLGYM_ADMIN_TOKEN``): a secret of at least 16
characters. ``check_admin`` compares a request's ``Authorization`` header with it in
constant time; ``admin_dependency`` makes that the dependency of an admin router, given
where the app keeps the token (the server's settings, the cluster's config).

    admin = APIRouter(dependencies=[Depends(admin_dependency(lambda r: r.app.state.token))])
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Header, Request
from pydantic import AfterValidator, SecretStr

from rollgym.server.http.errors import Forbidden, Unauthorized

MIN_TOKEN_CHARS = 16


def _strong(token: SecretStr) -> SecretStr:
    if len(token.get_secret_value()) < MIN_TOKEN_CHARS:
        raise ValueError(
            f"admin_token must be at least {MIN_TOKEN_CHARS} characters (ROLLGYM_ADMIN_TOKEN)"
        )
    return token


AdminToken = Annotated[SecretStr, AfterValidator(_strong)]
"""The admin token of a settings model: refused under 16 characters."""


def check_admin(authorization: str | None, token: SecretStr) -> None:
    """``Authorization: Bearer <token>`` or ``Unauthorized`` (none) / ``Forbidden`` (another)."""
    if not authorization:
        raise Unauthorized("admin routes need the header 'Authorization: Bearer <token>'")
    scheme, _, given = authorization.partition(" ")
    expected = token.get_secret_value()
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), expected.encode()):
        raise Forbidden("the bearer token is not the admin token")


def admin_dependency(token_of: Callable[[Request], SecretStr]) -> Callable[..., Awaitable[None]]:
    """The admin check as a dependency, ``async`` because it never blocks (FastAPI runs a plain
    ``def`` dependency in its thread pool: a thread hop per request)."""

    async def require_admin(
        request: Request, authorization: Annotated[str | None, Header()] = None
    ) -> None:
        check_admin(authorization, token_of(request))

    return require_admin
