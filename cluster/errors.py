"""The cluster's errors: one root, each with the HTTP status and code the router answers.

``ClusterError`` grows from ``rollgym.server.http.errors.HttpError``, the root the server's
errors share, so one handler answers both with one body; a missing or wrong admin token is
that module's ``Unauthorized`` or ``Forbidden`` (raised by the one admin check)::

    ClusterError                      500 server_error
    ├── InvalidRequest (ValueError)   422 invalid_request: a body the router reads is wrong
    ├── NoWeightFiles                 400 bad_weights: a weights path with no safetensors
    ├── WeightsTooLarge               413 weights_too_large: an upload over the limit
    ├── NoServer                      503 no_server: nothing in rotation (all restarting)
    ├── ServerLost                    503 server_lost: the server holding a session died
    ├── UnknownSession (LookupError)  404 not_found: no server holds this session
    ├── ServerUnreachable             503 server_lost: a server did not answer at all
    ├── ServerAnswered                the server's own error answer, passed on as it came
    ├── FanoutFailed                  503 server_error: no server applied a weight update
    └── ClusterStartError             ``cluster up`` could not start (no HTTP status)

The router turns each into ``rollgym.contract.wire.ErrorBody``; nothing of Ray or aiohttp
reaches a client.
"""

from __future__ import annotations

from rollgym.contract.wire import ErrorBody, ErrorCode
from rollgym.server.http.errors import HttpError


class ClusterError(HttpError):
    """Root of the cluster's errors (see the module docstring)."""


class InvalidRequest(ClusterError, ValueError):
    """A body the router itself reads does not fit (the server's answer to it: its 422)."""

    status = 422
    code = ErrorCode.INVALID_REQUEST


class NoWeightFiles(ClusterError):
    status = 400
    code = ErrorCode.BAD_WEIGHTS


class WeightsTooLarge(ClusterError):
    status = 413
    code = ErrorCode.WEIGHTS_TOO_LARGE


class NoServer(ClusterError):
    status = 503
    code = ErrorCode.NO_SERVER


class ServerLost(ClusterError):
    status = 503
    code = ErrorCode.SERVER_LOST


class UnknownSession(ClusterError, LookupError):
    status = 404
    code = ErrorCode.NOT_FOUND


class ServerUnreachable(ClusterError, ConnectionError):
    status = 503
    code = ErrorCode.SERVER_LOST


class ServerAnswered(ClusterError):
    """A server answered with an error: its status and body are passed on unchanged."""

    def __init__(self, status: int, error: ErrorBody):
        super().__init__(error.message)
        self.status = status
        self.error = error

    @property
    def code(self) -> str:  # type: ignore[override]  # per instance, from the answer
        return self.error.error

    def body(self) -> ErrorBody:
        return self.error


class FanoutFailed(ClusterError):
    status = 503


class ClusterStartError(ClusterError):
    pass
