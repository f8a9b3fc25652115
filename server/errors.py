"""The errors of ``server``: one root, each with the HTTP status it maps to at the boundary.

::

    ServerError                                   status  code
    ├── BadRequest(ServerError, ValueError)          400/422 bad_request (input that cannot work)
    │   ├── BadWeights(BadRequest)                   422  bad_weights: names, shapes, dtypes
    │   ├── TruncatedWeights(BadWeights)             400  truncated_weights: body ends early
    │   ├── WeightsTooLarge(BadRequest)              413  weights_too_large
    │   └── TranscriptMismatch(BadRequest)           409  transcript_mismatch: messages diverge
    │                                                     from a session's conversation
    ├── Unauthorized(ServerError)                    401  unauthorized: no bearer token
    ├── Forbidden(ServerError)                       403  forbidden: a wrong token
    ├── NotFound(ServerError, LookupError)           404  not_found (session, env id, path)
    ├── Conflict(ServerError)                        409  conflict
    │   ├── VersionMismatch(Conflict)                409  version_mismatch: X-Expected-Version
    │   └── UpdateInProgress(Conflict)               409  update_in_progress
    ├── NotEnabled(ServerError)                      501  not_enabled (a feature off in config)
    ├── EngineFailure(ServerError)                   503  engine_failure: the engine cannot serve
    └── TokenPrefixError(ServerError, AssertionError) 500 token_prefix: a turn's prompt does not
                                                          extend the last one (a server bug)

Routes never build error bodies by hand: an exception handler turns any ``ServerError``
into ``rollgym.contract.wire.ErrorBody`` with ``status`` and ``code`` from the class.
"""

from __future__ import annotations

from rollgym.contract.wire import ErrorCode


class ServerError(Exception):
    """Root of all server errors."""

    status: int = 500
    code: str = ErrorCode.SERVER_ERROR


class BadRequest(ServerError, ValueError):
    status = 422
    code = ErrorCode.BAD_REQUEST


class BadWeights(BadRequest):
    """The weights do not fit the served model (names, shapes or dtypes) or are unreadable."""

    code = ErrorCode.BAD_WEIGHTS


class TruncatedWeights(BadWeights):
    status = 400
    code = ErrorCode.TRUNCATED_WEIGHTS


class WeightsTooLarge(BadRequest):
    status = 413
    code = ErrorCode.WEIGHTS_TOO_LARGE


class TranscriptMismatch(BadRequest):
    """A session's LLM call sent messages that do not extend the session's conversation."""

    status = 409
    code = ErrorCode.TRANSCRIPT_MISMATCH


class Unauthorized(ServerError):
    status = 401
    code = ErrorCode.UNAUTHORIZED


class Forbidden(ServerError):
    status = 403
    code = ErrorCode.FORBIDDEN


class NotFound(ServerError, LookupError):
    status = 404
    code = ErrorCode.NOT_FOUND


class Conflict(ServerError):
    status = 409
    code = ErrorCode.CONFLICT


class VersionMismatch(Conflict):
    code = ErrorCode.VERSION_MISMATCH


class UpdateInProgress(Conflict):
    code = ErrorCode.UPDATE_IN_PROGRESS


class NotEnabled(ServerError):
    status = 501
    code = ErrorCode.NOT_ENABLED


class EngineFailure(ServerError):
    """The engine failed or is shutting down; generation cannot be served now."""

    status = 503
    code = ErrorCode.ENGINE_FAILURE


class TokenPrefixError(ServerError, AssertionError):
    """A turn's prompt does not extend the previous prompt plus its completion."""

    code = ErrorCode.TOKEN_PREFIX
