"""The router app in-process, over fake servers: stickiness, errors, fan-out, aggregation."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
from cluster_fakes import ADMIN, FakeSupervisor, config
from fastapi import FastAPI

from rollgym.cluster.router import SERVER_HEADER, create_router


@contextlib.asynccontextmanager
async def router(
    tmp_path, servers: int = 2
) -> AsyncIterator[tuple[httpx.AsyncClient, FakeSupervisor, FastAPI]]:
    supervisor = FakeSupervisor(servers)
    app = create_router(
        config(tmp_path, servers), supervisor=supervisor, connect=supervisor.connect
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://router") as client:
            yield client, supervisor, app


async def test_sessions_spread_over_servers_and_stay_where_they_were_made(tmp_path) -> None:
    async with router(tmp_path) as (client, _, _app):
        made = [await client.post("/v1/sessions", json={"env_id": "e"}) for _ in range(4)]
        homes = {r.json()["session_id"]: r.headers[SERVER_HEADER] for r in made}
        assert sorted(homes.values()) == ["s0", "s0", "s1", "s1"]
        for session_id, home in homes.items():
            step = await client.post(f"/v1/sessions/{session_id}/step", json={"action": "x"})
            chat = await client.post(
                "/v1/chat/completions",
                json={"model": "m", "messages": [], "session_id": session_id},
            )
            header = await client.post(
                "/v1/chat/completions", json={}, headers={"X-Rollgym-Session": session_id}
            )
            assert step.headers[SERVER_HEADER] == chat.headers[SERVER_HEADER] == home
            assert header.headers[SERVER_HEADER] == home


async def test_a_session_on_a_dead_server_gets_a_clear_error_and_the_other_serves(tmp_path) -> None:
    async with router(tmp_path) as (client, supervisor, app):
        a = (await client.post("/v1/sessions", json={})).json()["session_id"]
        b = (await client.post("/v1/sessions", json={})).json()["session_id"]
        control = app.state.cluster.control
        home_a = control.fleet.sessions.find(a).server
        supervisor.kill(int(home_a[1]))
        lost = await client.post(f"/v1/sessions/{a}/step", json={"action": "x"})
        assert lost.status_code == 503 and lost.json()["error"] == "server_lost"
        again = await client.post(f"/v1/sessions/{a}/step", json={"action": "x"})
        assert again.status_code == 503 and "start a new session" in again.json()["message"]
        ok = await client.post(f"/v1/sessions/{b}/step", json={"action": "x"})
        assert ok.status_code == 200 and ok.headers[SERVER_HEADER] != home_a


async def test_unknown_sessions_and_missing_tokens_are_clear_errors(tmp_path) -> None:
    async with router(tmp_path) as (client, _, _app):
        missing = await client.post("/v1/sessions/nope/step", json={"action": "x"})
        assert missing.status_code == 404 and missing.json()["error"] == "not_found"
        assert (await client.get("/admin/cluster")).status_code == 401
        wrong = await client.get("/admin/cluster", headers={"Authorization": "Bearer wrong"})
        assert wrong.status_code == 403
        bad = await client.post("/admin/buffer/pull", json={"num_groups": 0}, headers=ADMIN)
        assert bad.status_code == 422 and bad.json()["error"] == "invalid_request"


async def test_a_weight_upload_moves_the_cluster_version_once(tmp_path) -> None:
    async with router(tmp_path) as (client, supervisor, _):
        headers = {**ADMIN, "X-Expected-Version": "0"}
        answer = await client.post("/admin/weights", content=b"safetensors", headers=headers)
        assert answer.status_code == 200 and answer.json()["policy_version"] == 1
        assert (await client.get("/health")).json()["policy_version"] == 1
        assert [b.version for b in supervisor.boxes] == [1, 1]
        stale = await client.post("/admin/weights", content=b"x", headers=headers)
        assert stale.status_code == 409 and stale.json()["error"] == "version_mismatch"
        status = (await client.get("/admin/cluster", headers=ADMIN)).json()
        assert [s["policy_version"] for s in status["servers"]] == [1, 1]


async def test_metrics_label_every_server_after_the_routers_own(tmp_path) -> None:
    async with router(tmp_path) as (client, _, _app):
        text = (await client.get("/metrics")).text
        assert "rollgym_cluster_policy_version 0.0" in text
        assert 'rollgym_up{server="s0"} 1.0' in text and 'rollgym_up{server="s1"} 1.0' in text
