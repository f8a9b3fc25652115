"""The trainer's errors: one root, with the server's HTTP failures translated at the client.

::

    TrainerError
    ├── TrainerConfigError(TrainerError, ValueError)  a config value is wrong (says how to fix it)
    ├── ServerReplyError(TrainerError)                the server answered with an error body
    │   ├── AuthError(ServerReplyError)               401/403: missing or wrong admin token
    │   └── VersionConflict(ServerReplyError)         409 version_mismatch: the server is not at
    │                                                 the expected policy version (another
    │                                                 writer, or a restart)
    ├── ServerUnavailable(TrainerError, ConnectionError)  no answer: not started, died, timed out
    ├── ProtocolError(TrainerError)                   an answer that does not fit the wire schema
    ├── StarvedError(TrainerError, TimeoutError)      no trainable group arrived in time
    ├── CheckpointError(TrainerError)                 a checkpoint is missing or unreadable
    └── ServedWeightsMismatch(TrainerError)           the server serves other weights than
                                                      pushed (the canary, when it stops runs)

httpx and pydantic errors never leave ``trainer.client``; callers catch ``TrainerError``.
"""

from __future__ import annotations


class TrainerError(Exception):
    """Root of all trainer errors."""


class TrainerConfigError(TrainerError, ValueError):
    """A configuration value is invalid; the message says which and how to fix it."""


class ServerReplyError(TrainerError):
    """The server answered with an error: ``status`` and its ``ErrorBody`` code and message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"server answered {status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


class AuthError(ServerReplyError):
    """The admin token is missing (401) or wrong (403)."""


class VersionConflict(ServerReplyError):
    """The server's policy version is not the one the trainer expected (409)."""


class ServerUnavailable(TrainerError, ConnectionError):
    """The server did not answer: not started yet, gone, or the request timed out."""


class ProtocolError(TrainerError):
    """The server's answer does not match the wire schema (a version skew or a bug)."""


class StarvedError(TrainerError, TimeoutError):
    """No trainable group arrived within the stall timeout (is a rollout job running?)."""


class CheckpointError(TrainerError):
    """A checkpoint is missing, incomplete or does not match this run."""


class ServedWeightsMismatch(TrainerError):
    """The server's canary found it serves other weights than those pushed
    (``trainer.canary``; raised only with ``canary.stop_on_mismatch``)."""
