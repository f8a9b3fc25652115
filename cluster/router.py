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
| ``GET /admin/archive`` | every server's archive in turn, by one cursor (``cluster.archive``) |
| ``/admin/weights...`` | the control plane: one staged copy to every server, one version |
| ``/admin/rollouts`` | every server, each with its share of the budget (``cluster.work``) |
| ``/admin/evaluations`` | the least-loaded server plays the whole evaluation (all serve one version) |
| ``/admin/buffer/pull``, ``/ack`` | every server's buffer; acks to the owner |
| ``/admin/cluster`` | the cluster's status; ``POST /admin/cluster/scale`` adds or removes servers, ``POST /admin/cluster/down`` stops everything |

The routes are the server's own declarations (``rollgym.contract.api``; a test checks that
the router answers every one of them) and the router's two (``cluster.status``). Every
forwarded answer carries ``X-Rollgym-Server`` (which server answered). A call whose server
died gets ``503 server_lost``; with no server in rotation, ``503 no_server``. Errors, the
admin check, the admin token's rule and the last-resort answer (an exception nothing
translated is a logged 500 with the one error body, never a bare one) are the server's
(``rollgym.server.http``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Callable, Hashable
from pathlib import Path
from typing import Annotated

import orjson
from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request, Response
from pydantic import ValidationError

from rollgym.cluster.aggregate import merge_dashboards, relabel
from rollgym.cluster.archive import read_archive
from rollgym.cluster.config import ClusterConfig
from rollgym.cluster.control import Connect, ControlPlane
from rollgym.cluster.errors import InvalidRequest, ServerLost, ServerUnreachable, UnknownSession
from rollgym.cluster.fleet import Slot
from rollgym.cluster.metrics import RouterMetrics
from rollgym.cluster.routing import Owner, caller_of
from rollgym.cluster.servers import HttpServer, Reply
from rollgym.cluster.status import DOWN, SCALE, STATUS, ClusterStatus, ScaleRequest
from rollgym.cluster.supervisor import RaySupervisor, Supervisor
from rollgym.cluster.weights import WeightStore
from rollgym.contract import api
from rollgym.contract.archive import ArchivePage, ArchiveQuery
from rollgym.contract.dashboard import (
    DashboardData,
    DashboardQuery,
    TrainerAccepted,
    TrainerReport,
)
from rollgym.contract.wire import (
    AckRequest,
    AckResponse,
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
from rollgym.server.http.auth import admin_dependency
from rollgym.server.http.declared import declared
from rollgym.server.http.errors import install_error_handlers
from rollgym.server.http.guards import LastResort
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
    for route, endpoint in PASS_THROUGH:
        app.add_route(route.path, endpoint, methods=[route.method])
    install_error_handlers(app)
    app.add_middleware(LastResort)  # the server's last resort: no call ever gets a bare 500
    return app


def get_cluster(request: Request) -> Cluster:
    cluster: Cluster = request.app.state.cluster
    return cluster


async def _cluster(request: Request) -> Cluster:
    """The dependency, ``async`` like every one here: FastAPI runs a plain ``def`` one in its
    thread pool, a thread hop per request (server/routes/deps.py has the measurement)."""
    return get_cluster(request)


ClusterDep = Annotated[Cluster, Depends(_cluster)]


require_admin = admin_dependency(lambda request: get_cluster(request).config.admin_token)
agents = APIRouter()
admin = APIRouter(dependencies=[Depends(require_admin)])


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
    if place.owner is Owner.LOST or not slot.reachable:
        raise ServerLost(
            f"session {session_id!r} was on server {place.server}, which was lost: "
            "the episode is gone; start a new session"
        )
    return slot


# --- agents -----------------------------------------------------------------------------


@declared(agents, api.HEALTH)
async def health(cluster: ClusterDep) -> Health:
    cluster.control.fleet.pick()  # NoServer (503) while none is in rotation
    return Health(policy_version=cluster.control.version)


@declared(agents, api.POLICY)
async def policy(cluster: ClusterDep) -> PolicyInfo:
    """A server's own answer (its model, the kind of update it takes), with the cluster's
    version and update state."""
    slot = cluster.control.fleet.pick()
    assert slot.api is not None
    reply = await slot.api.forward(api.POLICY.method, api.POLICY.path, {}, b"")
    served = PolicyInfo.model_validate_json(reply.body)
    return served.model_copy(
        update={"policy_version": cluster.control.version, "updating": cluster.control.updating}
    )


# The forwarding routes are plain Starlette endpoints (``PASS_THROUGH``): the server
# validates their bodies, and FastAPI's per-request machinery would only add to the hop.


async def models(request: Request) -> Response:
    cluster = get_cluster(request)
    return await forward(cluster, cluster.control.fleet.pick(), request, "models")


async def create_session(request: Request) -> Response:
    cluster = get_cluster(request)
    caller = caller_of(request.headers.get("authorization"))
    group = _group_named(await request.body(), caller)
    fleet = cluster.control.fleet
    slot = fleet.pick() if group is None else _group_slot(cluster, *group)
    response = await forward(cluster, slot, request, "session_create")
    if response.status_code == 201:
        session_id = orjson.loads(response.body)["session_id"]
        fleet.sessions.bind(session_id, slot.name, caller)
        if group is not None:
            fleet.groups.arrived(group[0])
    return response


def _group_named(body: bytes, caller: str) -> tuple[Hashable, int] | None:
    """The group a session-create body names (``caller``'s) and its size; None for a lone
    session, and for a body the server will refuse (forwarded as it came: the server's 4xx)."""
    try:
        request = SessionCreate.model_validate_json(body)
    except ValidationError:
        return None
    name = group_name(request, caller)
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
    if place.owner is Owner.LOST or not slot.reachable:
        fleet.groups.arrived(name)  # a turned-away member counts: G of them free the name
        raise ServerLost(
            f"this session's group has members on server {place.server}, which was lost: "
            "the group cannot fill; start a new group (another group_id or seed)"
        )
    return slot


async def step_session(request: Request) -> Response:
    return await _to_session(request, "session_step")


async def session_tool_call(request: Request) -> Response:
    return await _to_session(request, "session_tool_call")


async def session_chat(request: Request) -> Response:
    """A chat call at the session's own base URL: to the server that holds the session."""
    return await _to_session(request, "chat_session")


async def _to_session(request: Request, route: str) -> Response:
    cluster, session_id = get_cluster(request), request.path_params["session_id"]
    return await forward(cluster, _session_slot(cluster, session_id), request, route)


async def close_session(request: Request) -> Response:
    """Forwarded to the session's server; forgotten once that server closed it, or once it
    says it does not know it to the caller that made it (see ``cluster.routing``)."""
    cluster, session_id = get_cluster(request), request.path_params["session_id"]
    sessions = cluster.control.fleet.sessions
    slot = _session_slot(cluster, session_id)
    place = sessions.find(session_id)
    response = await forward(cluster, slot, request, "session_close")
    made_it = place is not None and place.caller == caller_of(request.headers.get("authorization"))
    if response.status_code == 200 or (response.status_code == 404 and made_it):
        sessions.drop(session_id)
    return response


async def chat(request: Request) -> Response:
    """A chat call with a session goes to its server, one without to the least-loaded
    server; a ``session_id`` that is not a string is the server's 422, answered here."""
    cluster = get_cluster(request)
    session_id = request.headers.get("x-rollgym-session")
    if session_id is None:
        body = await request.body()
        if b'"session_id"' in body:  # parse only the bodies that may name one
            with contextlib.suppress(orjson.JSONDecodeError, AttributeError, TypeError):
                session_id = orjson.loads(body).get("session_id")
    if session_id is not None and not isinstance(session_id, str):
        raise InvalidRequest(f"session_id: a string, not {type(session_id).__name__}")
    if session_id is not None:
        return await forward(cluster, _session_slot(cluster, session_id), request, "chat_session")
    return await forward(cluster, cluster.control.fleet.pick(), request, "chat")


async def completions(request: Request) -> Response:
    cluster = get_cluster(request)
    return await forward(cluster, cluster.control.fleet.pick(), request, "completions")


@declared(agents, api.METRICS)
async def metrics(cluster: ClusterDep) -> Response:
    rotation = cluster.control.fleet.rotation()
    replies = await asyncio.gather(
        *(s.api.forward("GET", api.METRICS.path, {}, b"") for s in rotation if s.api is not None),
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


@declared(agents, api.DASHBOARD_DATA)
async def dashboard_data(
    cluster: ClusterDep, query: Annotated[DashboardQuery, Query()]
) -> DashboardData:
    """Every server's dashboard data, merged (``cluster.aggregate.merge_dashboards``)."""
    path = f"{api.DASHBOARD_DATA.path}?buckets={query.buckets}&points={query.points}"
    cluster.control.fleet.pick()  # NoServer (503) while none is in rotation
    rotation = cluster.control.fleet.rotation()
    replies = await asyncio.gather(
        *(s.api.forward("GET", path, {}, b"") for s in rotation if s.api is not None),
        return_exceptions=True,
    )
    views = [view for r in replies if (view := _dashboard_view(r)) is not None]
    if not views:
        raise ServerLost("no server answered for the dashboard: retry shortly")
    return merge_dashboards(views, cluster.control.version)


def _dashboard_view(reply: Reply | BaseException) -> DashboardData | None:
    """A server's dashboard data; None for one that failed or answered something else."""
    if not isinstance(reply, Reply) or reply.status != 200:
        return None
    try:
        return DashboardData.model_validate_json(reply.body)
    except ValidationError:
        return None


PASS_THROUGH = (
    (api.MODELS, models),
    (api.SESSION_CREATE, create_session),
    (api.SESSION_STEP, step_session),
    (api.SESSION_TOOL_CALL, session_tool_call),
    (api.SESSION_CLOSE, close_session),
    (api.CHAT, chat),
    (api.SESSION_CHAT, session_chat),
    (api.RESPONSES, chat),  # a session's calls go to its server, as chat's
    (api.COMPLETIONS, completions),
    (api.DASHBOARD_PAGE, dashboard_page),
    (api.DASHBOARD_ASSET, dashboard_page),  # after /dashboard/data (FastAPI's)
)


# --- admin ------------------------------------------------------------------------------


@declared(admin, api.WEIGHTS_UPLOAD)
async def upload_weights(
    request: Request,
    cluster: ClusterDep,
    x_expected_version: Annotated[int | None, Header(ge=0)] = None,
) -> WeightUpdateResult:
    """Raw safetensors bytes: staged once, then loaded by every server (one version)."""
    staged = await cluster.control.store.stage_stream(request.stream())
    return await cluster.control.update(staged, x_expected_version)


@declared(admin, api.WEIGHTS_FROM_PATH)
async def weights_from_path(body: WeightsFromPath, cluster: ClusterDep) -> WeightUpdateResult:
    staged = await asyncio.to_thread(cluster.control.store.stage_path, Path(body.path))
    return await cluster.control.update(staged, body.expected_version)


@declared(admin, api.NCCL_INIT)
async def nccl_init(body: NcclInit, cluster: ClusterDep) -> PolicyInfo:
    """GPU hosts: every server joins the trainer's NCCL group (one rank each, in order)."""
    return await cluster.control.nccl_init(body)


@declared(admin, api.NCCL_UPDATE)
async def nccl_update(body: NcclUpdate, cluster: ClusterDep) -> WeightUpdateResult:
    """GPU hosts: every server receives the broadcast the trainer starts after this call."""
    return await cluster.control.update_nccl(body)


@declared(admin, api.ROLLOUTS_START)
async def start_rollouts(body: RolloutJob, cluster: ClusterDep) -> RolloutStatus:
    return await cluster.control.work.start(body)


@declared(admin, api.ROLLOUTS)
async def rollout_status(cluster: ClusterDep) -> RolloutStatus:
    return await cluster.control.work.status()


@declared(admin, api.ROLLOUTS_STOP)
async def stop_rollouts(cluster: ClusterDep, drain: bool = False) -> RolloutStatus:
    return await cluster.control.work.stop(drain)


@declared(admin, api.EVALUATE)
async def evaluation(request: Request) -> Response:
    cluster = get_cluster(request)
    return await forward(cluster, cluster.control.fleet.pick(), request, "evaluations")


@declared(admin, api.PULL)
async def pull(body: PullRequest, cluster: ClusterDep) -> PullResponse:
    return await cluster.control.work.pull(body, cluster.control.version)


@declared(admin, api.ACK)
async def ack(body: AckRequest, cluster: ClusterDep) -> AckResponse:
    return AckResponse(acked=await cluster.control.work.ack(body.group_ids))


@declared(admin, api.ARCHIVE)
async def archive(cluster: ClusterDep, query: Annotated[ArchiveQuery, Query()]) -> ArchivePage:
    """Every server's archive in turn, by one cursor (``cluster.archive``)."""
    return await read_archive(cluster.control.fleet, query)


@declared(admin, api.TRAINER_REPORT)
async def trainer_report(body: TrainerReport, cluster: ClusterDep) -> TrainerAccepted:
    """The trainer's step report goes to every server (each shows the training stage)."""
    payload = body.model_dump_json().encode()
    headers = {"content-type": "application/json"}
    rotation = cluster.control.fleet.rotation()
    replies = await asyncio.gather(
        *(
            s.api.forward("POST", api.TRAINER_REPORT.path, headers | _auth(cluster), payload)
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


@declared(admin, STATUS)
async def cluster_status(cluster: ClusterDep) -> ClusterStatus:
    return cluster.control.status()


@declared(admin, SCALE)
async def cluster_scale(body: ScaleRequest, cluster: ClusterDep) -> ClusterStatus:
    """Add or remove servers (``ControlPlane.scale``); answers once they are up or gone."""
    return await cluster.control.scale(body.servers)


@declared(admin, DOWN)
async def cluster_down(cluster: ClusterDep) -> ClusterStatus:
    """Stop every server and Ray, then the router (as Ctrl-C on ``cluster up`` would).

    Answers once the servers and Ray are gone; the router's process ends right after."""
    status = cluster.control.status()
    await cluster.control.close()
    asyncio.get_running_loop().call_soon(cluster.stop)
    return status
