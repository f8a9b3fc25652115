"""The engine's errors: one root, no HTTP in them.

The engine floor knows nothing of the server above it; the server's one exception handler
maps each class to a status and an ``ErrorCode`` (``rollgym.server.errors.ENGINE_ERRORS``),
as httpx maps its transports' errors onto its own. vLLM's errors are converted inside the
adapter (``engine.vllm.engine``) and never leak. ::

    EngineError                                 the engine's own fault: a bug, a policy
    │                                           store it cannot read      (500 server_error)
    ├── BadInput(EngineError, ValueError)       input that cannot work here: a prompt
    │   │                                       too long, sampling values vLLM refuses, a
    │   │                                       path it cannot read       (422 bad_request)
    │   ├── BadWeights(BadInput)                weights that do not fit the served model:
    │   │   │                                   names, shapes, dtypes, values (422 bad_weights)
    │   │   └── TruncatedWeights(BadWeights)    a file cut short in transit
    │   │                                                          (400 truncated_weights)
    │   ├── WeightsTooLarge(BadInput)           an upload over its limit (413)
    │   └── WeightsNotFound(BadInput, LookupError)  no such path on the server (404)
    ├── Conflict(EngineError)                   not now, or not in this configuration (409)
    │   ├── VersionMismatch(Conflict)           the engine is not at the expected version
    │   ├── UpdateInProgress(Conflict)          another weight update is running
    │   └── NotEnabled(Conflict)                a feature the engine's configuration
    │                                           leaves off (NCCL, speculation, FP8 on a CPU)
    └── EngineFailure(EngineError)              the engine failed or is shutting down: it
                                                cannot serve now (503 engine_failure)

A weight update that fails with ``BadInput`` or ``Conflict`` counts as rejected (the
request's doing), any other as failed (``engine.weights.updater``).
"""

from __future__ import annotations


class EngineError(Exception):
    """Root of the engine's errors (see the module docstring)."""


class BadInput(EngineError, ValueError):
    """The request cannot work here; the message says what to change."""


class BadWeights(BadInput):
    """The weights do not fit the served model (names, shapes or dtypes) or are unreadable."""


class TruncatedWeights(BadWeights):
    """A safetensors file ends before its header says it does."""


class WeightsTooLarge(BadInput):
    """An upload passed its limit (``max_weight_bytes``)."""


class WeightsNotFound(BadInput, LookupError):
    """A weights path that does not exist on the server."""


class Conflict(EngineError):
    """Not now (another update, another version), or not in this configuration."""


class VersionMismatch(Conflict):
    """The engine serves another version than the update expected."""


class UpdateInProgress(Conflict):
    """Another weight update is running; retry when it is done."""


class NotEnabled(Conflict):
    """A feature the engine's configuration leaves off; retrying will not help."""


class EngineFailure(EngineError):
    """The engine failed or is shutting down; generation cannot be served now."""
