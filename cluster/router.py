"""The router: one HTTP entry point with the API of one server, in front of all of them.

Agents, the trainer and the dashboard use it exactly as they use ``rollgym serve``
(``docs/http-api.md``); what each route does here:

| route | goes to |
|---|---|
| ``POST /v1/sessions`` | the least-loaded server, or its group's; the router remembers which |
| ``/v1/sessions/{id}/...``, a chat call with a session | the server that holds the session |
| ``/v1/chat/completions``, ``/v1/completions`` without one | the least-loaded server |
| ``/health``, ``/v1/policy`` | answered here, with the cluster's version |
| ``/metrics``, ``/dashboard/data`` | every server's, merged (``cluster.aggregate``) |
| ``/admin/weights...`` | the control plane: one staged copy to every server, one version |
| ``/admin/rollouts`` | every server, each with its share of the budget (``cluster.work``) |
| ``/admin/evaluations`` | the least-loaded server plays the whole evaluation (all serve one version) |
| ``/admin/buffer/pull``, ``/ack`` | every server's buffer; acks to the owner |
| ``/admin/cluster`` | the cluster's status; ``POST /admin/cluster/down`` stops everything |

Every forwarded answer carries ``X-Rollgym-Server`` (which server answered). A call whose
server died gets ``503 server_lost``; with no server in rotation, ``503 no_server``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import time
from collections.abc import AsyncIterator, Callable, Hashable
from pathlib import Path
from typing import Annotated

import orjson
from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from rollgym.cluster.aggregate import merge_dashboards, relabel
from rollgym.cluster.config import ClusterConfig
from rollgym.cluster.control import Connect, ControlPlane
from rollgym.cluster.errors import (
    ClusterError,
    Forbidden,
    ServerLost,
    ServerUnreachable,
    Unauthorized,
    UnknownSession,
)
from rollgym.cluster.fleet import Slot
from rollgym.cluster.metrics import RouterMetrics
from rollgym.cluster.routing import Owner
from rollgym.cluster.servers import HttpServer, Reply
from rollgym.cluster.status import ClusterStatus
from rollgym.cluster.supervisor import RaySupervisor, Supervisor
from rollgym.cluster.weights import WeightStore
from rollgym.contract.dashboard import DashboardData, TrainerAccepted, TrainerReport
from rollgym.contract.wire import (
    AckRequest,
    AckResponse,
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
    SessionCreate,
    WeightsFromPath,
    WeightUpdateResult,
)
from rollgym.server.sessions.groups import group_name

SERVER_HEADER = "X-Rollgym-Server"
MAX_WEIGHT_BYTES = 16 << 30


@dataclasses.dataclass
class Cluster:
    """What the routes use, on ``app.state.cluster``."""

    config: ClusterConfig
    control: ControlPlane
    metrics: RouterMetrics
    stop: Callable[[], None]


def create_router(
    config: ClusterConfig,
    *,
    supervisor: Supervisor | None = None,
    connect: Connect | None = None,
    stop: Callable[[], None] = lambda: None,
) -> FastAPI:
    """The router's app; its lifespan starts the servers (Ray) and stops them at the end.

    ``stop`` ends the process that serves the app (``POST /admin/cluster/down`` calls it).
    """
    token = config.admin_token.get_secret_value()

    def http(url: str) -> HttpServer:
        return HttpServer(url, token, timeout_s=config.request_timeout_s)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = WeightStore(config.weights_dir, max_bytes=MAX_WEIGHT_BYTES)
        control = ControlPlane(config, supervisor or RaySupervisor(config), store, connect or http)
        metrics = RouterMetrics()
        control.on_fanout = metrics.fanout.observe
        async with control:
            app.state.cluster = Cluster(config, control, metrics, stop)
            yield

    app = FastAPI(title="rollgym cluster router", lifespan=lifespan)
    app.include_router(agents)
    app.include_router(admin)
    for path, endpoint, methods in PASS_THROUGH:
        app.add_route(path, endpoint, methods=methods)
    app.add_exception_handler(ClusterError, _cluster_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _invalid_request)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    return app


def get_cluster(request: Request) -> Cluster:
    cluster: Cluster = request.app.state.cluster
    return cluster


async def _cluster(request: Request) -> Cluster:
    """The dependency, ``async`` like every one here: FastAPI runs a plain ``def`` one in its
    thread pool, a thread hop per request (server/routes/deps.py has the measurement)."""
    return get_cluster(request)


ClusterDep = Annotated[Cluster, Depends(_cluster)]


async def require_admin(
    cluster: ClusterDep, authorization: Annotated[str | None, Header()] = None
) -> None:
    if not authorization:
        raise Unauthorized("admin routes need the header 'Authorization: Bearer <token>'")
    scheme, _, given = authorization.partition(" ")
    expected = cluster.config.admin_token.get_secret_value()
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), expected.encode()):
        raise Forbidden("the bearer token is not the admin token")


agents = APIRouter()
admin = APIRouter(prefix="/admin", dependencies=[Depends(require_admin)])


# --- forwarding -------------------------------------------------------------------------


async def forward(cluster: Cluster, slot: Slot, request: Request, route: str) -> Response:
    """Send ``request`` to ``slot`` as it came; answer what the server answered."""
    assert slot.api is not None
    body = await request.body()
    path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    slot.in_flight += 1
    started = time.perf_counter()
    try:
        reply = await slot.api.forward(request.method, path, request.headers, body)
    except ServerUnreachable as exc:
        cluster.metrics.lost.inc()
        cluster.control.evict(slot, f"a call failed: {exc}")
        raise ServerLost(
            f"server {slot.name} was lost while it handled this call; "
            "a session it held is gone: start a new one"
        ) from exc
    finally:
        slot.in_flight -= 1
        cluster.metrics.forwarded.labels(route=route).observe(time.perf_counter() - started)
    return _response(reply, slot)


def _response(reply: Reply, slot: Slot) -> Response:
    headers = {k: v for k, v in reply.headers.items() if k != "content-type"}
    headers[SERVER_HEADER] = slot.name
    return Response(
        reply.body, reply.status, headers=headers, media_type=reply.headers.get("content-type")
    )


def _session_slot(cluster: Cluster, session_id: str) -> Slot:
    place = cluster.control.fleet.sessions.find(session_id)
    if place is None:
        raise UnknownSession(
            f"no session {session_id!r} on this cluster (closed, expired or never made)"
        )
    slot = cluster.control.fleet.by_name(place.server)
    if place.owner is Owner.LOST or not slot.serving:
        raise ServerLost(
            f"session {session_id!r} was on server {place.server}, which was lost: "
            "the episode is gone; start a new session"
        )
    return slot


# --- agents -----------------------------------------------------------------------------


@agents.get("/health")
async def health(cluster: ClusterDep) -> Health:
    cluster.control.fleet.pick()  # NoServer (503) while none is in rotation
    return Health(policy_version=cluster.control.version)


@agents.get("/v1/policy")
async def policy(cluster: ClusterDep) -> PolicyInfo:
    model = await _model_name(cluster)
    return PolicyInfo(
        policy_version=cluster.control.version, model=model, updating=cluster.control.updating
    )


async def _model_name(cluster: Cluster) -> str:
    slot = cluster.control.fleet.pick()
    assert slot.api is not None
    reply = await slot.api.forward("GET", "/v1/models", {}, b"")
    return str(orjson.loads(reply.body)["data"][0]["id"])


# The forwarding routes are plain Starlette endpoints (``PASS_THROUGH``): the server
# validates their bodies, and FastAPI's per-request machinery would only add to the hop.


async def models(request: Request) -> Response:
    cluster = get_cluster(request)
    return await forward(cluster, cluster.control.fleet.pick(), request, "models")


async def create_session(request: Request) -> Response:
    cluster = get_cluster(request)
    group = _group_named(await request.body())
    fleet = cluster.control.fleet
    slot = fleet.pick() if group is None else _group_slot(cluster, *group)
    response = await forward(cluster, slot, request, "session_create")
    if response.status_code == 201:
        session_id = orjson.loads(response.body)["session_id"]
        fleet.sessions.bind(session_id, slot.name)
        if group is not None:
            fleet.groups.arrived(group[0])
    return response


def _group_named(body: bytes) -> tuple[Hashable, int] | None:
    """The group a session-create body names and its size; None for a lone session, and
    for a body the server will refuse (it is forwarded as it came: the server's 4xx)."""
    try:
        request = SessionCreate.model_validate_json(body)
    except ValidationError:
        return None
    name = group_name(request)
    if name is None or request.group_size is None:
        return None
    return name, request.group_size


def _group_slot(cluster: Cluster, name: Hashable, size: int) -> Slot:
    """The server of the group's first member; a first member takes the least-loaded."""
    fleet = cluster.control.fleet
    place = fleet.groups.find(name)
    if place is None:
        slot = fleet.pick()
        fleet.groups.reserve(name, slot.name, size)
        return slot
    slot = fleet.by_name(place.server)
    if place.owner is Owner.LOST or not slot.serving:
        fleet.groups.arrived(name)  # a turned-away member counts: G of them free the name
        raise ServerLost(
            f"this session's group has members on server {place.server}, which was lost: "
            "the group cannot fill; start a new group (another group_id or seed)"
        )
    return slot


async def step_session(request: Request) -> Response:
    cluster, session_id = get_cluster(request), request.path_params["session_id"]
    return await forward(cluster, _session_slot(cluster, session_id), request, "session_step")


async def close_session(request: Request) -> Response:
    cluster, session_id = get_cluster(request), request.path_params["session_id"]
    response = await forward(cluster, _session_slot(cluster, session_id), request, "session_close")
    if response.status_code in (200, 404):
        cluster.control.fleet.sessions.drop(session_id)
    return response


async def chat(request: Request) -> Response:
    cluster = get_cluster(request)
    session_id = request.headers.get("x-rollgym-session")
    if session_id is None:
        body = await request.body()
        if b'"session_id"' in body:  # parse only the bodies that may name one
            with contextlib.suppress(orjson.JSONDecodeError, AttributeError, TypeError):
                session_id = orjson.loads(body).get("session_id")
    if session_id is not None:
        return await forward(cluster, _session_slot(cluster, session_id), request, "chat_session")
    return await forward(cluster, cluster.control.fleet.pick(), request, "chat")


async def completions(request: Request) -> Response:
    cluster = get_cluster(request)
    return await forward(cluster, cluster.control.fleet.pick(), request, "completions")


@agents.get("/metrics")
async def metrics(cluster: ClusterDep) -> Response:
    rotation = cluster.control.fleet.rotation()
    replies = await asyncio.gather(
        *(s.api.forward("GET", "/metrics", {}, b"") for s in rotation if s.api is not None),
        return_exceptions=True,
    )
    texts = {
        s.name: r.body.decode()
        for s, r in zip(rotation, replies, strict=True)
        if isinstance(r, Reply)
    }
    own = cluster.metrics.render(cluster.control.status())
    return Response(own + relabel(texts), media_type="text/plain; version=0.0.4; charset=utf-8")


async def dashboard_page(request: Request) -> Response:
    cluster = get_cluster(request)
    return await forward(cluster, cluster.control.fleet.pick(), request, "dashboard")


@agents.get("/dashboard/data")
async def dashboard_data(
    cluster: ClusterDep,
    buckets: Annotated[int, Query(ge=1, le=1000)] = 60,
    points: Annotated[int, Query(ge=2, le=5000)] = 600,
) -> DashboardData:
    """Every server's dashboard data, merged (``cluster.aggregate.merge_dashboards``)."""
    path = f"/dashboard/data?buckets={buckets}&points={points}"
    cluster.control.fleet.pick()  # NoServer (503) while none is in rotation
    rotation = cluster.control.fleet.rotation()
    replies = await asyncio.gather(
        *(s.api.forward("GET", path, {}, b"") for s in rotation if s.api is not None),
        return_exceptions=True,
    )
    views = [
        DashboardData.model_validate_json(r.body)
        for r in replies
        if isinstance(r, Reply) and r.status == 200
    ]
    if not views:
        raise ServerLost("no server answered for the dashboard: retry shortly")
    return merge_dashboards(views, cluster.control.version)


PASS_THROUGH = (
    ("/v1/models", models, ["GET"]),
    ("/v1/sessions", create_session, ["POST"]),
    ("/v1/sessions/{session_id}/step", step_session, ["POST"]),
    ("/v1/sessions/{session_id}", close_session, ["DELETE"]),
    ("/v1/chat/completions", chat, ["POST"]),
    ("/v1/completions", completions, ["POST"]),
    ("/dashboard", dashboard_page, ["GET"]),
    ("/dashboard/{name}", dashboard_page, ["GET"]),  # after /dashboard/data (FastAPI's)
)


# --- admin ------------------------------------------------------------------------------


@admin.post("/weights")
async def upload_weights(
    request: Request,
    cluster: ClusterDep,
    x_expected_version: Annotated[int | None, Header(ge=0)] = None,
) -> WeightUpdateResult:
    """Raw safetensors bytes: staged once, then loaded by every server (one version)."""
    staged = await cluster.control.store.stage_stream(request.stream())
    return await cluster.control.update(staged, x_expected_version)


@admin.post("/weights/from-path")
async def weights_from_path(body: WeightsFromPath, cluster: ClusterDep) -> WeightUpdateResult:
    staged = await asyncio.to_thread(cluster.control.store.stage_path, Path(body.path))
    return await cluster.control.update(staged, body.expected_version)


@admin.post("/weights/nccl/init")
async def nccl_init(body: NcclInit, cluster: ClusterDep) -> PolicyInfo:
    """GPU hosts: every server joins the trainer's NCCL group (one rank each, in order)."""
    return await cluster.control.nccl_init(body)


@admin.post("/weights/nccl")
async def nccl_update(body: NcclUpdate, cluster: ClusterDep) -> WeightUpdateResult:
    """GPU hosts: every server receives the broadcast the trainer starts after this call."""
    return await cluster.control.update_nccl(body)


@admin.post("/rollouts")
async def start_rollouts(body: RolloutJob, cluster: ClusterDep) -> RolloutStatus:
    return await cluster.control.work.start(body)


@admin.get("/rollouts")
async def rollout_status(cluster: ClusterDep) -> RolloutStatus:
    return await cluster.control.work.status()


@admin.delete("/rollouts")
async def stop_rollouts(cluster: ClusterDep, drain: bool = False) -> RolloutStatus:
    return await cluster.control.work.stop(drain)


@admin.post("/evaluations")
async def evaluation(request: Request) -> Response:
    cluster = get_cluster(request)
    return await forward(cluster, cluster.control.fleet.pick(), request, "evaluations")


@admin.post("/buffer/pull")
async def pull(body: PullRequest, cluster: ClusterDep) -> PullResponse:
    return await cluster.control.work.pull(body, cluster.control.version)


@admin.post("/buffer/ack")
async def ack(body: AckRequest, cluster: ClusterDep) -> AckResponse:
    return AckResponse(acked=await cluster.control.work.ack(body.group_ids))


@admin.post("/dashboard/trainer")
async def trainer_report(body: TrainerReport, cluster: ClusterDep) -> TrainerAccepted:
    """The trainer's step report goes to every server (each shows the training stage)."""
    payload = body.model_dump_json().encode()
    headers = {"content-type": "application/json"}
    rotation = cluster.control.fleet.rotation()
    replies = await asyncio.gather(
        *(
            s.api.forward("POST", "/admin/dashboard/trainer", headers | _auth(cluster), payload)
            for s in rotation
            if s.api is not None
        ),
        return_exceptions=True,
    )
    for reply in replies:
        if isinstance(reply, Reply) and reply.status == 200:
            return TrainerAccepted.model_validate_json(reply.body)
    raise ServerLost("no server took the trainer's report: retry shortly")


def _auth(cluster: Cluster) -> dict[str, str]:
    return {"authorization": f"Bearer {cluster.config.admin_token.get_secret_value()}"}


@admin.get("/cluster")
async def cluster_status(cluster: ClusterDep) -> ClusterStatus:
    return cluster.control.status()


@admin.post("/cluster/down")
async def cluster_down(cluster: ClusterDep) -> ClusterStatus:
    """Stop every server and Ray, then the router (as Ctrl-C on ``cluster up`` would).

    Answers once the servers and Ray are gone; the router's process ends right after."""
    status = cluster.control.status()
    await cluster.control.close()
    asyncio.get_running_loop().call_soon(cluster.stop)
    return status


# --- errors -----------------------------------------------------------------------------


async def _cluster_error(request: Request, exc: ClusterError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return JSONResponse(exc.body().model_dump(), status_code=exc.status, headers=headers)


async def _invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
    problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
    body = ErrorBody(error=ErrorCode.INVALID_REQUEST, message=problems)
    return JSONResponse(body.model_dump(), status_code=422)


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    body = ErrorBody(error=ErrorCode.HTTP_ERROR, message=str(exc.detail))
    return JSONResponse(body.model_dump(), status_code=exc.status_code)
