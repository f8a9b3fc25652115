"""The dashboard's routes: the page, its script, the data it polls, the trainer's reports.

| method | path | auth | answer |
|---|---|---|---|
| GET | ``/dashboard`` | none | the page (HTML; its script polls ``/dashboard/data``) |
| GET | ``/dashboard/dashboard.js``, ``/dashboard/dashboard.css`` | none | its assets |
| GET | ``/dashboard/data?buckets=60&points=600`` | none | ``DashboardData`` |
| POST | ``/admin/dashboard/trainer`` | admin token | ``TrainerReport`` -> ``TrainerAccepted`` |

The page and its data are read-only numbers, like ``/metrics``; only the trainer's reports
need the admin token. The assets ship as package data (no CDN: nothing outside the
server is fetched).
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Response

from rollgym.contract import api
from rollgym.contract.dashboard import (
    AlarmPoint,
    DashboardData,
    DashboardQuery,
    TrainerAccepted,
    TrainerReport,
)
from rollgym.server.errors import NotFound
from rollgym.server.http.declared import declared
from rollgym.server.observability.cost import live_board
from rollgym.server.routes.deps import ServicesDep, require_admin

router = APIRouter()
admin_router = APIRouter(dependencies=[Depends(require_admin)])

_ASSETS = {"dashboard.js": "text/javascript", "dashboard.css": "text/css"}


@functools.cache
def _asset(name: str) -> bytes:
    return resources.files("rollgym.server.dashboard").joinpath(name).read_bytes()


@declared(router, api.DASHBOARD_PAGE, include_in_schema=False)
async def page() -> Response:
    return Response(_asset("index.html"), media_type="text/html; charset=utf-8")


@declared(router, api.DASHBOARD_DATA)
async def data(services: ServicesDep, query: Annotated[DashboardQuery, Query()]) -> DashboardData:
    """Everything the page draws (``buckets`` stage slices, at most ``points`` readings)."""
    recorder = services.dashboard
    now = recorder.clock()
    latest = recorder.latest()
    reports = recorder.trainer_reports
    totals = {"trajectories": latest.trajectories if latest else 0.0}
    totals.update(latest.dropped if latest else {})
    totals["truncated_by_context"] = latest.truncated_by_context if latest else 0.0
    return DashboardData(
        now=now,
        started_at=recorder.started_at,
        interval_s=recorder.config.interval_s,
        model=services.settings.engine.model_name,
        policy_version=services.engine.policy_version,
        trainer_version=services.buffer.trainer_version,
        trainer_step=reports[-1].step if reports else None,
        totals=totals,
        stages=recorder.stage_view(now, query.buckets),
        series=recorder.series(query.points),
        latency=recorder.latency(),
        version_lag=recorder.version_lags(),
        rewards=recorder.rewards(),
        alarms=[AlarmPoint(step=r.step, metrics=r.alarms) for r in reports if r.alarms],
        cost=live_board(services.cost, recorder),
    )


@declared(router, api.DASHBOARD_ASSET, include_in_schema=False)
async def asset(name: str) -> Response:
    if name not in _ASSETS:  # declared after /dashboard/data, which it must not shadow
        raise NotFound(f"no dashboard asset {name!r}")
    return Response(_asset(name), media_type=_ASSETS[name])


@declared(admin_router, api.TRAINER_REPORT)
async def trainer_report(body: TrainerReport, services: ServicesDep) -> TrainerAccepted:
    """The trainer's step: its busy spans become the training stage; the answer carries the
    cost board with the step's samples counted (the trainer logs it to its trackers)."""
    spans = services.dashboard.trainer_report(body)
    return TrainerAccepted(
        step=body.step, spans=spans, cost=live_board(services.cost, services.dashboard)
    )
