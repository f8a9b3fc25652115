"""The HTTP API is declared once (``rollgym.contract.api``): the server serves exactly those
routes with those models, the cluster's router answers every one of them, and each route
declared admin refuses a call without the token on both."""

from __future__ import annotations

from typing import Any

import pytest
from cluster_fakes import ADMIN as CLUSTER_ADMIN
from cluster_fakes import FakeSupervisor, group
from cluster_fakes import config as cluster_config
from fastapi import FastAPI
from fastapi.routing import APIRoute
from server_fakes import engine_factory, in_process, settings
from starlette.routing import Route as StarletteRoute

from rollgym.cluster import status
from rollgym.cluster.router import create_router
from rollgym.contract import api
from rollgym.data.sources import items_of
from rollgym.server.app import create_app

DECLARED = {(route.method, route.path) for route in api.ROUTES}


def served(app: FastAPI) -> set[tuple[str, str]]:
    """Every (method, path) ``app`` routes, FastAPI's own docs pages aside."""
    docs = {app.openapi_url, app.docs_url, app.redoc_url, app.swagger_ui_oauth2_redirect_url}
    return {
        (method, route.path)
        for route in app.routes
        if isinstance(route, StarletteRoute) and route.path not in docs
        for method in (route.methods or set()) - {"HEAD"}
    }


@pytest.fixture
def server_app(tmp_path, engine) -> FastAPI:
    return create_app(settings(tmp_path), engine_factory=engine_factory(engine))


@pytest.fixture
def router_app(tmp_path) -> FastAPI:
    supervisor = FakeSupervisor(2)
    return create_router(
        cluster_config(tmp_path, 2), supervisor=supervisor, connect=supervisor.connect
    )


def test_the_server_serves_exactly_the_declared_routes(server_app) -> None:
    assert served(server_app) == DECLARED
    schema_paths = set(server_app.openapi()["paths"])  # the page and its assets stay out
    assert schema_paths == {path for _, path in DECLARED} - {"/dashboard", "/dashboard/{name}"}


def test_each_server_route_takes_and_answers_the_declared_models(server_app) -> None:
    routes = {(r.method, r.path): r for r in api.ROUTES}
    for route in server_app.routes:
        if not isinstance(route, APIRoute):
            continue
        (method,) = route.methods
        declared = routes[(method, route.path)]
        assert route.response_model is declared.answer, route.path
        assert route.status_code == declared.status, route.path
        body = route.body_field.field_info.annotation if route.body_field else None
        assert body is declared.request, route.path


def test_the_router_answers_every_server_route_and_adds_only_its_own(
    server_app, router_app
) -> None:
    own = {(r.method, r.path) for r in (status.STATUS, status.SCALE, status.DOWN)}
    assert served(router_app) == served(server_app) | own


def _call(route: api.Route[Any]) -> tuple[str, str]:
    return route.method, route.url(session_id="s", call_id="c", name="dashboard.js")


@pytest.mark.parametrize(
    "route", [r for r in api.ROUTES if r.auth == "admin"], ids=lambda r: f"{r.method} {r.path}"
)
async def test_admin_routes_refuse_a_call_without_the_token(server_app, router_app, route) -> None:
    async with in_process(server_app, agent_key=None) as server:
        answer = await server.request(*_call(route))
        assert answer.status_code == 401 and answer.json()["error"] == "unauthorized"
    async with in_process(router_app, agent_key=None) as router:
        answer = await router.request(*_call(route))
        assert answer.status_code == 401 and answer.json()["error"] == "unauthorized"
        assert answer.headers["WWW-Authenticate"] == "Bearer"


async def test_the_router_pages_through_every_servers_archive(tmp_path) -> None:
    """``rollgym export --server <router>`` reads every server's archive by one cursor."""
    supervisor = FakeSupervisor(2)
    for box, count in zip(supervisor.boxes, (3, 2), strict=True):
        for _ in range(count):
            g = group(0)
            box.groups[g.group_id] = (g, "acked")
    app = create_router(
        cluster_config(tmp_path, 2), supervisor=supervisor, connect=supervisor.connect
    )
    pages = []
    async with in_process(app, agent_key=None) as router:
        after: int | None = 0
        while after is not None:
            answer = await router.get(
                api.ARCHIVE.path,
                params={"kind": "groups", "after": after, "limit": 2},
                headers=CLUSTER_ADMIN,
            )
            assert answer.status_code == 200, answer.text
            page = api.ARCHIVE.answer.model_validate_json(answer.content)  # type: ignore[union-attr]
            pages.append(page)
            after = page.next_after
    ids = [t.group_id for t, _ in items_of(pages)]
    expected = [g.group_id for box in supervisor.boxes for g, _ in box.groups.values()]
    assert ids == expected and len(ids) == 5
    seqs = [item.seq for page in pages for item in page.items]
    assert seqs == sorted(seqs)  # each item's seq is the cursor of what follows it


async def test_the_router_answers_every_path_of_the_servers_openapi(server_app, router_app) -> None:
    """Derived from what the server publishes, not from the declarations: each operation of
    its OpenAPI, called on the router, is forwarded, merged or answered there: never
    Starlette's own 404 or 405 (``http_error``: no such route) and never a 500."""
    operations = [
        (method.upper(), path)
        for path, item in server_app.openapi()["paths"].items()
        for method in item
    ]
    assert len(operations) == len(DECLARED) - 2  # all but the dashboard page and its assets
    async with in_process(router_app, agent_key=None) as router:
        for method, path in operations:
            url = path.format(session_id="s", call_id="c", name="dashboard.js")
            answer = await router.request(method, url, json={}, headers=CLUSTER_ADMIN)
            assert answer.status_code < 500, (method, path, answer.text)
            if answer.status_code >= 400:
                assert answer.json()["error"] != "http_error", (method, path, answer.text)
