"""The errors of ``server``: one root, each with the HTTP status it maps to at the boundary.

``ServerError`` grows from ``server.http.errors.HttpError``, the root the cluster's router
shares; so do the admin token's two errors, raised by the one admin check::

    HttpError                                         status  code
    ├── Unauthorized(HttpError)                        401  unauthorized: no bearer token
    ├── Forbidden(HttpError)                           403  forbidden: a wrong token
    └── ServerError(HttpError)                         500  server_error
        ├── BadRequest(ServerError, ValueError)        422  bad_request: input that cannot work
        │   ├── RequestTooLarge(BadRequest)            413  request_too_large: a body over
        │   │                                               max_body_bytes (refused as it
        │   │                                               streams)
        │   └── TranscriptMismatch(BadRequest)         409  transcript_mismatch: messages
        │                                                   diverge from a session's conversation
        ├── EnvNotAllowed(ServerError, Forbidden)      403  env_not_allowed: an env id or kwarg
        │                                                   agents may not use (``env_access``)
        ├── NotFound(ServerError, LookupError)         404  not_found (session, env id, path)
        ├── QuotaExceeded(ServerError)                 429  quota_exceeded: an agent key over
        │                                                   one of its quotas (``agent_keys``)
        ├── Conflict(ServerError)                      409  conflict
        │   ├── ContextFull(Conflict)                  409  context_full: a session's context
        │   │                                               reached max_model_len
        │   ├── NotEnabled(Conflict)                   409  not_enabled: a feature the server's
        │   │                                               configuration leaves off
        │   └── EnvFailure(Conflict)                   409  env_failure: a session's env raised
        │                                                   or reported an infrastructure fault
        ├── WindowFull(ServerError)                    429  window_full: the staleness window
        │                                                   has no room (with Retry-After)
        └── TokenPrefixError(ServerError,              500  token_prefix: a turn's prompt does
                             AssertionError)                not extend the last one (a bug)

The engine floor has a root of its own, ``rollgym.engine.errors.EngineError``, with no HTTP
in it; ``ENGINE_ERRORS`` gives each of its classes a status and a code here, as httpx maps
its transports' errors onto its own.

Routes never build error bodies by hand: the app's one exception handler turns any
``ServerError`` or ``EngineError`` into ``rollgym.contract.wire.ErrorBody`` with the status
and code of its class, and the headers a ``ServerError``'s ``headers()`` asks for.
"""

from __future__ import annotations

from collections.abc import Mapping

from rollgym.contract.wire import ErrorCode
from rollgym.engine import errors as engine
from rollgym.server.http.errors import Forbidden, HttpError


class ServerError(HttpError):
    """Root of all server errors (status 500, ``server_error``, unless a subclass says)."""


class BadRequest(ServerError, ValueError):
    status = 422
    code = ErrorCode.BAD_REQUEST


class RequestTooLarge(BadRequest):
    """A request body over ``max_body_bytes`` (the weight upload has its own limit)."""

    status = 413
    code = ErrorCode.REQUEST_TOO_LARGE


class TranscriptMismatch(BadRequest):
    """A session's LLM call sent messages that do not extend the session's conversation."""

    status = 409
    code = ErrorCode.TRANSCRIPT_MISMATCH


class EnvNotAllowed(ServerError, Forbidden):
    """An env id or env kwarg that the server's ``env_access`` does not open to agents."""

    code = ErrorCode.ENV_NOT_ALLOWED


class NotFound(ServerError, LookupError):
    status = 404
    code = ErrorCode.NOT_FOUND


class QuotaExceeded(ServerError):
    """An agent key is over one of its quotas; the message names the quota."""

    status = 429
    code = ErrorCode.QUOTA_EXCEEDED

    def __init__(self, message: str, *, retry_after_s: int):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Conflict(ServerError):
    status = 409
    code = ErrorCode.CONFLICT


class ContextFull(Conflict):
    """A session's context reached ``max_model_len``: its episode is over."""

    code = ErrorCode.CONTEXT_FULL


class NotEnabled(Conflict):
    """The request needs a feature this server's configuration leaves off (a 4xx: the
    request cannot work here, and retrying it will not help)."""

    code = ErrorCode.NOT_ENABLED


class EnvFailure(Conflict):
    """A session's env raised, or reported an infrastructure fault: the episode is over and
    invalid (never trained on); the message names the env's error."""

    code = ErrorCode.ENV_FAILURE


class WindowFull(ServerError):
    """The staleness window has no room for another group now; retry after ``retry_after_s``."""

    status = 429
    code = ErrorCode.WINDOW_FULL

    def __init__(self, message: str, *, retry_after_s: int):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class TokenPrefixError(ServerError, AssertionError):
    """A turn's prompt does not extend the previous prompt plus its completion."""

    code = ErrorCode.TOKEN_PREFIX


# Each engine error's status and code: the most specific class listed wins (``engine_status``).
ENGINE_ERRORS: Mapping[type[engine.EngineError], tuple[int, str]] = {
    engine.EngineError: (500, ErrorCode.SERVER_ERROR),
    engine.BadInput: (422, ErrorCode.BAD_REQUEST),
    engine.BadWeights: (422, ErrorCode.BAD_WEIGHTS),
    engine.TruncatedWeights: (400, ErrorCode.TRUNCATED_WEIGHTS),
    engine.WeightsTooLarge: (413, ErrorCode.WEIGHTS_TOO_LARGE),
    engine.WeightsNotFound: (404, ErrorCode.NOT_FOUND),
    engine.Conflict: (409, ErrorCode.CONFLICT),
    engine.VersionMismatch: (409, ErrorCode.VERSION_MISMATCH),
    engine.UpdateInProgress: (409, ErrorCode.UPDATE_IN_PROGRESS),
    engine.NotEnabled: (409, ErrorCode.NOT_ENABLED),
    engine.EngineFailure: (503, ErrorCode.ENGINE_FAILURE),
}


def engine_status(exc: engine.EngineError) -> tuple[int, str]:
    """The HTTP status and error code an engine error answers with.

    >>> engine_status(engine.TruncatedWeights("cut"))[0], engine_status(engine.NotEnabled())[0]
    (400, 409)
    """
    return next(ENGINE_ERRORS[c] for c in type(exc).__mro__ if c in ENGINE_ERRORS)
