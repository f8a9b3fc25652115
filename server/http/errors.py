"""The HTTP errors both faces answer with (the server and the cluster's router): one body,
one handler.

``HttpError`` is the root of every error a client gets as ``rollgym.contract.wire.ErrorBody``:
the server's tree (``ServerError``) and the cluster's (``ClusterError``) grow from it, and
the two admin-token errors below are shared by both, raised by the one admin check
(``server.http.auth``)::

    HttpError                     status and code per class, ``headers()``, ``body()``
    ├── Unauthorized              401 unauthorized: no bearer token (WWW-Authenticate: Bearer)
    ├── Forbidden                 403 forbidden: a token, but not the right one
    ├── ServerError ...           the server's (server.errors)
    └── ClusterError ...          the router's (cluster.errors)

``install_error_handlers(app)`` makes any ``HttpError``, any body that does not fit its model
(422 ``invalid_request``) and Starlette's own errors (404 for an unknown path, 405...)
answer with that one body.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from rollgym.contract.wire import ErrorBody, ErrorCode

MAX_MESSAGE_CHARS = 2000


class HttpError(Exception):
    """Root of the errors a client gets as an ``ErrorBody`` (see the module docstring)."""

    status: int = 500
    code: str = ErrorCode.SERVER_ERROR
    retry_after_s: int | None = None  # sent as Retry-After: when trying again may work

    def headers(self) -> dict[str, str] | None:
        """Headers the answer carries besides the error body (``Retry-After`` when known)."""
        return None if self.retry_after_s is None else {"Retry-After": str(self.retry_after_s)}

    def body(self) -> ErrorBody:
        return ErrorBody(error=self.code, message=str(self))


class Unauthorized(HttpError):
    status = 401
    code = ErrorCode.UNAUTHORIZED

    def headers(self) -> dict[str, str] | None:
        return {"WWW-Authenticate": "Bearer"}


class Forbidden(HttpError):
    status = 403
    code = ErrorCode.FORBIDDEN


def error_bytes(code: str, message: str) -> bytes:
    """The one error body, encoded: any text a client sent (even a lone surrogate) is escaped
    so that encoding the answer can never fail."""
    safe = message[:MAX_MESSAGE_CHARS].encode("utf-8", "backslashreplace").decode("utf-8")
    return ErrorBody(error=code, message=safe).model_dump_json().encode()


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> Response:
    body = error_bytes(code, message)
    return Response(body, status_code=status, headers=headers, media_type="application/json")


def install_error_handlers(app: FastAPI, *, logger: logging.Logger | None = None) -> None:
    """One error body everywhere; with ``logger``, an ``HttpError`` of status 500 or more is
    logged there with its traceback."""

    async def http_error(request: Request, exc: HttpError) -> Response:
        if logger is not None and exc.status >= 500:
            logger.error("%s %s: %s", request.method, request.url.path, exc, exc_info=exc)
        body = exc.body()
        return error_response(exc.status, body.error, body.message, exc.headers())

    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        return error_response(422, ErrorCode.INVALID_REQUEST, problems)

    async def starlette(request: Request, exc: StarletteHTTPException) -> Response:
        return error_response(exc.status_code, ErrorCode.HTTP_ERROR, str(exc.detail))

    app.add_exception_handler(HttpError, http_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, invalid)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, starlette)  # type: ignore[arg-type]
