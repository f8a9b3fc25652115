"""The trainer's HTTP client of the rollout server: the only way the trainer reaches it.

Each call is a route the contract declares (``rollgym.contract.api``: method, path, body and
answer models), which imports nothing of the server; httpx and validation errors are
translated here into ``trainer.errors`` (see that module for the tree). The client is
synchronous because TRL's training loop is.

A server that restarts is waited for: a call that finds it gone, or answering 503, is
retried (with a growing pause) for up to ``reconnect_timeout_s``. Every call is safe to
repeat (a pull whose answer was lost leases groups that come back when the lease expires;
an ack is idempotent) except a weight push, which ``trainer.weights`` reconciles itself.

Example::

    with ServerClient(ClientConfig(url="http://127.0.0.1:8000", admin_token="t")) as client:
        version = client.policy_version()
        answer = client.pull(PullRequest(trainer_version=version, max_staleness=1, num_groups=4))
        client.ack([g.group_id for g in answer.groups])
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Iterator, Sequence
from types import TracebackType
from typing import Protocol, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from rollgym.contract import api
from rollgym.contract.api import Route
from rollgym.contract.canary import CANARY_HEADER, CanaryProbes
from rollgym.contract.dashboard import TrainerAccepted, TrainerReport
from rollgym.contract.wire import (
    AckRequest,
    ErrorBody,
    ErrorCode,
    EvaluationRequest,
    EvaluationResult,
    NcclInit,
    NcclUpdate,
    PolicyInfo,
    PullRequest,
    PullResponse,
    RolloutJob,
    RolloutStatus,
    WeightUpdateResult,
)
from rollgym.trainer.config import ClientConfig
from rollgym.trainer.errors import (
    AuthError,
    ProtocolError,
    ServerReplyError,
    ServerUnavailable,
    VersionConflict,
)

M = TypeVar("M", bound=BaseModel)


class SizedBody(Protocol):
    """A body of known length, sent in parts (``trainer.weights.SafetensorsBody``)."""

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[bytes | memoryview]: ...


Body = bytes | SizedBody
# httpx's transport copies what each send() leaves over of the part it sends: small parts
# keep that cheap, where one 538 MB bytes object took 40-60 s to send (quadratic copying).
PART_BYTES = 1 << 20

# Seconds added to a long-poll's own wait before the HTTP request itself gives up.
_LONG_POLL_MARGIN_S = 15.0
_RETRY_PAUSES_S = (0.5, 1.0, 2.0, 5.0)  # then 5 s between tries


class ServerClient:
    """Typed calls to the server's agent and admin routes (see docs/http-api.md)."""

    def __init__(self, config: ClientConfig, *, http: httpx.Client | None = None) -> None:
        """``http`` replaces the real connection (tests pass a client over a fake app)."""
        self.config = config
        headers = {}
        if config.admin_token is not None:
            headers["Authorization"] = f"Bearer {config.admin_token.get_secret_value()}"
        if http is None:
            http = httpx.Client(base_url=config.url, timeout=config.request_timeout_s)
        http.headers.update(headers)
        self._http = http

    def __enter__(self) -> ServerClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # --- agent-facing reads -------------------------------------------------------------

    def policy_version(self, *, retry: bool = True) -> int:
        """The version the server samples with now (``GET /health``)."""
        return self._call(api.HEALTH, retry=retry).policy_version

    def policy(self, *, retry: bool = True) -> PolicyInfo:
        """The served policy's version and model, and the kind of update the server takes."""
        return self._call(api.POLICY, retry=retry)

    def wait_until_ready(self, timeout_s: float, *, poll_s: float = 0.25) -> int:
        """Poll ``/health`` until the server answers; return its policy version."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return self.policy_version(retry=False)
            except ServerUnavailable:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(poll_s)

    # --- buffer -------------------------------------------------------------------------

    def pull(self, request: PullRequest) -> PullResponse:
        """Long-poll for complete groups inside the staleness window (leased until acked)."""
        return self._call(api.PULL, request, timeout=request.timeout_s + _LONG_POLL_MARGIN_S)

    def ack(self, group_ids: Sequence[str]) -> int:
        """Confirm leased groups as consumed; idempotent. Returns how many the server acked."""
        if not group_ids:
            return 0
        return self._call(api.ACK, AckRequest(group_ids=list(group_ids))).acked

    # --- weights and rollout jobs -------------------------------------------------------

    def push_weights(
        self, body: Body, *, expected_version: int | None, canary: CanaryProbes | None = None
    ) -> WeightUpdateResult:
        """Upload a safetensors file (bytes, or ``trainer.weights.SafetensorsBody``, which is
        sent from the tensors' memory); the server applies it and bumps its version by one.

        With ``expected_version`` the server refuses (409 ``version_mismatch``, raised here as
        ``VersionConflict``) unless it is at that version, so two writers can never
        interleave unnoticed. ``canary``'s probes are scored by the server once the weights
        serve (``rollgym.contract.canary``); its verdict is the answer's ``canary``.
        """
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(len(body))}
        if expected_version is not None:
            headers["X-Expected-Version"] = str(expected_version)
        if canary is not None:
            headers[CANARY_HEADER] = canary.model_dump_json()
        return self._call(
            api.WEIGHTS_UPLOAD,
            content=_parts(body),
            headers=headers,
            timeout=self.config.weights_timeout_s,
            retry=False,  # not blindly: see trainer.weights
        )

    def join_broadcast(self, init: NcclInit, *, timeout_s: float) -> PolicyInfo:
        """Have the server join the trainer's weight broadcast group (``trainer.broadcast``);
        answers once every rank has met, at most ``timeout_s``."""
        return self._call(api.NCCL_INIT, init, timeout=timeout_s, retry=False)

    def receive_broadcast(
        self, update: NcclUpdate, *, canary: CanaryProbes | None, timeout_s: float
    ) -> WeightUpdateResult:
        """Announce a broadcast; the server receives it, applies it and bumps its version as
        for an upload (``push_weights``: ``expected_version``, ``canary``)."""
        headers = {CANARY_HEADER: canary.model_dump_json()} if canary is not None else {}
        return self._call(api.NCCL_UPDATE, update, headers=headers, timeout=timeout_s, retry=False)

    def start_rollouts(self, job: RolloutJob) -> RolloutStatus:
        """Start (or replace) the server's rollout job."""
        return self._call(api.ROLLOUTS_START, job)

    def rollouts(self) -> RolloutStatus:
        return self._call(api.ROLLOUTS)

    def stop_rollouts(self) -> RolloutStatus:
        return self._call(api.ROLLOUTS_STOP)

    def evaluate(self, request: EvaluationRequest, *, timeout_s: float) -> EvaluationResult:
        """Evaluation episodes with the server's current policy, beside any rollout job
        (one group per seed, nothing filtered); ``timeout_s`` bounds the whole call."""
        return self._call(
            api.EVALUATE,
            request,
            timeout=timeout_s,
            retry=False,  # a lost answer is an evaluation lost, not one to run twice
        )

    def report_step(self, report: TrainerReport) -> TrainerAccepted:
        """One optimizer step for the server's dashboard (``trainer.dashboard``)."""
        return self._call(api.TRAINER_REPORT, report)

    # --- plumbing -----------------------------------------------------------------------

    def _call(
        self,
        route: Route[M],
        body: BaseModel | None = None,
        *,
        timeout: float | None = None,
        retry: bool = True,
        **kwargs: object,
    ) -> M:
        """``route`` with ``body`` as its JSON (or ``content=`` raw bytes); its answer model."""
        assert route.answer is not None
        if body is not None:
            kwargs["json"] = body.model_dump(mode="json")
        response = self._send(route.method, route.path, timeout=timeout, retry=retry, **kwargs)
        return self._model(route.answer, response)

    def _send(
        self,
        method: str,
        path: str,
        *,
        timeout: float | None = None,
        retry: bool = True,
        **kwargs: object,
    ) -> httpx.Response:
        """One call; with ``retry``, repeated while the server is gone or restarting."""
        deadline = time.monotonic() + (self.config.reconnect_timeout_s if retry else 0.0)
        pauses = itertools.chain(_RETRY_PAUSES_S, itertools.repeat(_RETRY_PAUSES_S[-1]))
        while True:
            try:
                return self._send_once(method, path, timeout=timeout, **kwargs)
            except (ServerUnavailable, ServerReplyError) as exc:
                retryable = isinstance(exc, ServerUnavailable) or exc.status == 503
                pause = next(pauses)
                if not retryable or time.monotonic() + pause > deadline:
                    raise
                time.sleep(pause)

    def _send_once(
        self,
        method: str,
        path: str,
        *,
        timeout: float | None = None,
        **kwargs: object,
    ) -> httpx.Response:
        request = self._http.build_request(
            method,
            path,
            timeout=timeout if timeout is not None else self.config.request_timeout_s,
            **kwargs,  # type: ignore[arg-type]  # json/content/headers, checked by httpx
        )
        try:
            response = self._http.send(request)
        except httpx.TimeoutException as exc:
            raise ServerUnavailable(f"{method} {path}: no answer in time ({exc})") from exc
        except httpx.TransportError as exc:
            raise ServerUnavailable(f"{method} {path}: cannot reach the server ({exc})") from exc
        if response.is_success:
            return response
        raise _error_from(response)

    @staticmethod
    def _model(model: type[M], response: httpx.Response) -> M:
        try:
            return model.model_validate_json(response.content)
        except ValidationError as exc:
            raise ProtocolError(
                f"{response.request.url.path}: answer does not fit {model.__name__}: {exc}"
            ) from exc


def _parts(body: Body) -> Iterable[bytes | memoryview]:
    """What httpx sends: a body's own parts, or bytes in ``PART_BYTES`` slices."""
    if not isinstance(body, bytes):
        return body
    view = memoryview(body)
    return [view[start : start + PART_BYTES] for start in range(0, len(view), PART_BYTES)]


def _error_from(response: httpx.Response) -> ServerReplyError:
    """Translate a non-2xx answer (an ``ErrorBody``, or anything else) into a ``ServerReplyError``."""
    try:
        body = ErrorBody.model_validate_json(response.content)
        code, message = body.error, body.message
    except ValidationError:
        code, message = ErrorCode.HTTP_ERROR, response.text[:500]
    status = response.status_code
    if status in (401, 403):
        return AuthError(status, code, message)
    if code == ErrorCode.VERSION_MISMATCH:
        return VersionConflict(status, code, message)
    return ServerReplyError(status, code, message)
