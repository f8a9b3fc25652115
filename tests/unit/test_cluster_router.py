"""The router app in-process, over fake servers: stickiness, errors, fan-out, aggregation."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest
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


async def homes(client: httpx.AsyncClient, bodies: list[dict[str, object]]) -> list[str]:
    """Open a session per body, one after another; the server each landed on."""
    made = [await client.post("/v1/sessions", json=body) for body in bodies]
    assert [r.status_code for r in made] == [201] * len(bodies)
    return [r.headers[SERVER_HEADER] for r in made]


@pytest.mark.parametrize("servers", [2, 3])
async def test_a_groups_members_join_its_first_member_on_one_server(tmp_path, servers) -> None:
    async with router(tmp_path, servers) as (client, _, _app):
        member = {"env_id": "e", "group_id": "g", "group_size": 3}
        assert await homes(client, [member] * 3) == ["s0"] * 3
        # all 3 came: the name is free again, and the next group with it goes least-loaded
        assert await homes(client, [member]) != ["s0"]


async def test_groups_named_by_their_task_key_stay_together_and_groups_spread(tmp_path) -> None:
    async with router(tmp_path) as (client, _, _app):
        a = {"env_id": "e", "seed": 7, "group_size": 2}
        b = {"env_id": "e", "seed": 8, "group_size": 2}
        c = {"env_id": "e", "group_id": "c", "group_size": 2}
        d = {"env_id": "e", "group_id": "d", "group_size": 2}
        assert await homes(client, [a, b, a, b]) == ["s0", "s1", "s0", "s1"]
        assert await homes(client, [c, d, d, c]) == ["s0", "s1", "s1", "s0"]


async def test_a_group_whose_server_was_lost_refuses_its_later_members(tmp_path) -> None:
    async with router(tmp_path) as (client, supervisor, _app):
        member = {"env_id": "e", "group_id": "g", "group_size": 3}
        first = await client.post("/v1/sessions", json=member)
        home = first.headers[SERVER_HEADER]
        supervisor.kill(int(home[1]))
        session_id = first.json()["session_id"]
        await client.post(f"/v1/sessions/{session_id}/step", json={"action": "x"})  # evicts it
        for _ in range(2):
            refused = await client.post("/v1/sessions", json=member)
            assert refused.status_code == 503 and refused.json()["error"] == "server_lost"
            assert "start a new group" in refused.json()["message"]
        # 3 came (1 made, 2 refused): the name is free, and a new group opens where it can
        assert (await client.post("/v1/sessions", json=member)).status_code == 201


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"[1, 2]",
        b'{"group_size": 2}',
        b'{"env_id": "e", "group_id": "g", "group_size": "many"}',
        b"\xff\xfe",
    ],
)
async def test_a_body_the_server_will_refuse_is_forwarded_as_it_came(tmp_path, body) -> None:
    async with router(tmp_path) as (client, supervisor, _app):
        answer = await client.post(
            "/v1/sessions", content=body, headers={"content-type": "application/json"}
        )
        assert answer.status_code == 201 and answer.headers[SERVER_HEADER] == "s0"
        assert "POST /v1/sessions" in supervisor.servers[0].calls


# --- attacks through the router (issue 34) ---------------------------------------------

ALICE, BOB = {"Authorization": "Bearer alice-key"}, {"Authorization": "Bearer bob-key"}


async def test_another_keys_404_never_makes_the_router_forget_a_session(tmp_path) -> None:
    """Bob's DELETE of Alice's session is the server's 404 (it hides other keys' sessions);
    the router used to drop its binding on that 404, and Alice's next calls got 404 while
    her session held its slots until it idled out."""
    async with router(tmp_path) as (client, _, _app):
        made = await client.post("/v1/sessions", json={"env_id": "e"}, headers=ALICE)
        sid = made.json()["session_id"]
        bobs = await client.delete(f"/v1/sessions/{sid}", headers=BOB)
        assert bobs.status_code == 404
        step = await client.post(f"/v1/sessions/{sid}/step", json={"action": "x"}, headers=ALICE)
        assert step.status_code == 200, step.text
        assert (await client.delete(f"/v1/sessions/{sid}", headers=ALICE)).status_code == 200
        gone = await client.post(f"/v1/sessions/{sid}/step", json={"action": "x"}, headers=ALICE)
        assert gone.status_code == 404  # her own close is forgotten


async def test_a_session_the_server_forgot_is_forgotten_on_its_owners_404(tmp_path) -> None:
    async with router(tmp_path) as (client, supervisor, app):
        made = await client.post("/v1/sessions", json={"env_id": "e"}, headers=ALICE)
        sid = made.json()["session_id"]
        for server in supervisor.servers:
            server.sessions.pop(sid, None)  # it expired there
        assert (await client.delete(f"/v1/sessions/{sid}", headers=ALICE)).status_code == 404
        assert app.state.cluster.control.fleet.sessions.find(sid) is None


async def test_groups_are_placed_by_their_name_and_their_key(tmp_path) -> None:
    async with router(tmp_path) as (client, _, _app):
        member = {"env_id": "e", "group_id": "g", "group_size": 2}
        hers = await client.post("/v1/sessions", json=member, headers=ALICE)
        his = await client.post("/v1/sessions", json=member, headers=BOB)
        assert hers.headers[SERVER_HEADER] != his.headers[SERVER_HEADER]  # two groups, spread
        again = await client.post("/v1/sessions", json=member, headers=ALICE)
        assert again.headers[SERVER_HEADER] == hers.headers[SERVER_HEADER]


@pytest.mark.parametrize("session_id", [{"a": 1}, ["s"], 7, True])
async def test_a_session_id_that_is_not_a_string_is_a_4xx_never_a_bare_500(
    tmp_path, session_id
) -> None:
    async with router(tmp_path) as (client, _, _app):
        body = {"model": "m", "messages": [], "session_id": session_id}
        answer = await client.post("/v1/chat/completions", json=body)
        assert answer.status_code == 422 and answer.json()["error"] == "invalid_request"
        assert "session_id" in answer.json()["message"]


async def test_an_exception_nothing_translated_is_the_one_error_body(tmp_path) -> None:
    """The router has the server's last resort: a logged 500 with the one error body."""
    async with router(tmp_path) as (client, supervisor, _app):

        async def broken(*args: object) -> None:
            raise RuntimeError("a bug in the router")

        for server in supervisor.servers:
            server.forward = broken  # type: ignore[method-assign]
        answer = await client.post("/v1/completions", json={"model": "m", "prompt": "hi"})
        assert answer.status_code == 500 and answer.json()["error"] == "server_error"
        assert "a bug in the router" in answer.json()["message"]
