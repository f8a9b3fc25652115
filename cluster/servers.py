"""Talking to one rollout server over HTTP: its admin calls, and raw forwarding for the router.

``ServerAPI`` is the seam the control plane and the router use; ``HttpServer`` is the real
one (aiohttp: about half the per-call cost of httpx here, which matters for the router's
hop), and ``tests/unit/cluster_fakes.py`` has an in-memory twin. Every failure comes out as
a ``ClusterError``: ``ServerUnreachable`` when the server did not answer, ``ServerAnswered``
with the server's own ``ErrorBody`` when it answered with an error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

import aiohttp
from pydantic import BaseModel, ValidationError

from rollgym.cluster.errors import ServerAnswered, ServerUnreachable
from rollgym.contract import api
from rollgym.contract.api import Route
from rollgym.contract.archive import ArchivePage, ArchiveQuery
from rollgym.contract.wire import (
    AckRequest,
    ErrorBody,
    ErrorCode,
    Health,
    NcclInit,
    NcclUpdate,
    PolicyInfo,
    PullRequest,
    PullResponse,
    RolloutJob,
    RolloutStatus,
    WeightsFromPath,
    WeightUpdateResult,
)

M = TypeVar("M", bound=BaseModel)
# Headers a forwarded call keeps, both ways (hop-by-hop ones and the length are redone).
FORWARDED = frozenset(
    {"content-type", "authorization", "x-rollgym-session", "x-expected-version", "accept",
     "x-policy-version", "x-session-id", "www-authenticate", "retry-after"}
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Reply:
    """A forwarded call's answer, as the server gave it."""

    status: int
    headers: dict[str, str]
    body: bytes


class ServerAPI(Protocol):
    """What the cluster asks of one server (routes of ``rollgym.contract.api``)."""

    url: str

    async def health(self) -> Health: ...

    async def pull(self, request: PullRequest) -> PullResponse: ...

    async def ack(self, group_ids: Sequence[str]) -> int: ...

    async def weights_from_path(self, path: Path, expected: int) -> WeightUpdateResult: ...

    async def upload_weights(self, file: Path, expected: int) -> WeightUpdateResult: ...

    async def nccl_init(self, body: NcclInit) -> PolicyInfo: ...

    async def nccl_update(self, body: NcclUpdate) -> WeightUpdateResult: ...

    async def start_rollouts(self, job: RolloutJob) -> RolloutStatus: ...

    async def stop_rollouts(self, drain: bool) -> RolloutStatus: ...

    async def rollouts(self) -> RolloutStatus: ...

    async def archive(self, query: ArchiveQuery) -> ArchivePage: ...

    async def forward(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes
    ) -> Reply: ...

    async def close(self) -> None: ...


class HttpServer:
    """``ServerAPI`` over HTTP with one pooled aiohttp session (see the module docstring)."""

    def __init__(self, url: str, admin_token: str, *, timeout_s: float = 600.0):
        self.url = url.rstrip("/")
        self._admin = {"Authorization": f"Bearer {admin_token}"}
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=5.0)
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:  # made lazily: it must belong to the running loop
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=30)
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def health(self) -> Health:
        return await self._call(api.HEALTH, timeout_s=5.0)

    async def pull(self, request: PullRequest) -> PullResponse:
        return await self._call(api.PULL, request)

    async def ack(self, group_ids: Sequence[str]) -> int:
        return (await self._call(api.ACK, AckRequest(group_ids=list(group_ids)))).acked

    async def weights_from_path(self, path: Path, expected: int) -> WeightUpdateResult:
        body = WeightsFromPath(path=str(path), expected_version=expected)
        return await self._call(api.WEIGHTS_FROM_PATH, body)

    async def upload_weights(self, file: Path, expected: int) -> WeightUpdateResult:
        headers = {"X-Expected-Version": str(expected), "Content-Type": "application/octet-stream"}
        with file.open("rb") as data:
            return await self._call(api.WEIGHTS_UPLOAD, data, headers=headers)

    async def nccl_init(self, body: NcclInit) -> PolicyInfo:
        return await self._call(api.NCCL_INIT, body)

    async def nccl_update(self, body: NcclUpdate) -> WeightUpdateResult:
        return await self._call(api.NCCL_UPDATE, body)

    async def start_rollouts(self, job: RolloutJob) -> RolloutStatus:
        return await self._call(api.ROLLOUTS_START, job)

    async def stop_rollouts(self, drain: bool) -> RolloutStatus:
        return await self._call(api.ROLLOUTS_STOP, query={"drain": "true" if drain else "false"})

    async def rollouts(self) -> RolloutStatus:
        return await self._call(api.ROLLOUTS)

    async def archive(self, query: ArchiveQuery) -> ArchivePage:
        return await self._call(api.ARCHIVE, query=query.model_dump())

    async def forward(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes
    ) -> Reply:
        kept = {k: v for k, v in headers.items() if k.lower() in FORWARDED}
        try:
            async with self._http().request(
                method, self.url + path, data=body or None, headers=kept
            ) as response:
                data = await response.read()
                out = {k.lower(): v for k, v in response.headers.items() if k.lower() in FORWARDED}
                return Reply(response.status, out, data)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise ServerUnreachable(f"{self.url} did not answer ({_short(exc)})") from exc

    async def _call(
        self,
        route: Route[M],
        body: BaseModel | object | None = None,
        *,
        query: Mapping[str, object] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> M:
        """One declared call; the admin token goes with the routes that need it."""
        assert route.answer is not None
        sent = {**(self._admin if route.auth == "admin" else {}), **(headers or {})}
        kwargs: dict[str, object] = {"headers": sent}
        if isinstance(body, BaseModel):
            kwargs["data"] = body.model_dump_json()
            sent["Content-Type"] = "application/json"
        elif body is not None:
            kwargs["data"] = body
        if query:
            kwargs["params"] = {k: str(v) for k, v in query.items()}
        if timeout_s is not None:
            kwargs["timeout"] = aiohttp.ClientTimeout(total=timeout_s)
        path = route.path
        try:
            async with self._http().request(route.method, self.url + path, **kwargs) as response:  # type: ignore[arg-type]
                data = await response.read()
                status = response.status
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise ServerUnreachable(f"{self.url}{path} did not answer ({_short(exc)})") from exc
        if status >= 400:
            raise ServerAnswered(status, _error_body(status, data))
        try:
            return route.answer.model_validate_json(data)
        except ValidationError as exc:
            raise ServerAnswered(
                502, ErrorBody(error=ErrorCode.SERVER_ERROR, message=f"{path}: bad answer {exc}")
            ) from exc


def _error_body(status: int, data: bytes) -> ErrorBody:
    try:
        return ErrorBody.model_validate_json(data)
    except ValidationError:
        text = data[:200].decode(errors="replace")
        return ErrorBody(error=ErrorCode.HTTP_ERROR, message=f"HTTP {status}: {text}")


def _short(exc: BaseException) -> str:
    """An error in a few words: the kind, and the OS's reason if there is one."""
    cause = getattr(exc, "os_error", None) or exc.__cause__ or exc
    reason = getattr(cause, "strerror", None) or str(cause)
    return f"{type(exc).__name__}: {reason}"[:160]
