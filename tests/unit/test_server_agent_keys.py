"""Agent keys and quotas: the key check, each quota (429 + Retry-After), the key's name on
the trajectory, anonymous local development; in the pure module and through the app."""

from __future__ import annotations

import asyncio
import json

import pytest
from pydantic import ValidationError
from server_fakes import ADMIN, ADMIN_TOKEN, engine_factory, in_process, settings

from rollgym.contract.wire import PullResponse
from rollgym.engine.fake import FakeEngine
from rollgym.sandboxes.config import PoolConfig
from rollgym.sandboxes.fake import FakeSandboxPool
from rollgym.server.access.agent_keys import (
    ANONYMOUS,
    Agent,
    AgentKeys,
    AgentKeysConfig,
    AgentQuota,
    QuotaLedger,
)
from rollgym.server.app import create_app
from rollgym.server.config import SandboxSettings, ServerSettings, SessionConfig
from rollgym.server.errors import BadRequest, QuotaExceeded
from rollgym.server.http.errors import Forbidden, Unauthorized

GUESS = "rollgym/GuessNumber-v0"
SHELL = "rollgym/Shell-v0"  # plays in a sandbox of the server's pool
MODEL = "rollgym-tiny"
ALICE_KEY, BOB_KEY = "alice-secret-key-0001", "bob-secret-key-000002"
ALICE, BOB = {"Authorization": f"Bearer {ALICE_KEY}"}, {"Authorization": f"Bearer {BOB_KEY}"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def two_keys(**alice_quota: int) -> AgentKeysConfig:
    return AgentKeysConfig(
        keys={"alice": ALICE_KEY, "bob": BOB_KEY}, quotas={"alice": AgentQuota(**alice_quota)}
    )


def chat(messages: object = None, **fields: object) -> dict[str, object]:
    return {"model": MODEL, "messages": messages or [{"role": "user", "content": "hi"}], **fields}


# --- the key check --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "error"),
    [
        (None, Unauthorized),
        ("", Unauthorized),
        ("Bearer not-a-key-of-anyone-at-all", Forbidden),
        (f"Basic {ALICE_KEY}", Forbidden),
        ("Bearer ", Forbidden),
    ],
)
def test_a_missing_key_is_401_and_a_wrong_one_403(header, error) -> None:
    with pytest.raises(error):
        AgentKeys(two_keys()).identify(header)


def test_each_key_is_its_own_agent_with_its_quota() -> None:
    keys = AgentKeys(two_keys(max_sessions=1))
    assert keys.identify(f"Bearer {ALICE_KEY}") == Agent("alice", AgentQuota(max_sessions=1))
    assert keys.identify(f"bearer {BOB_KEY}") == Agent("bob", AgentQuota())


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ({"keys": {"alice": "short"}}, "at least 16"),
        ({"keys": {"alice": ALICE_KEY, "bob": ALICE_KEY}}, "share a secret"),
        ({"keys": {ANONYMOUS: ALICE_KEY}}, "not a key name"),
        ({"keys": {"al ice": ALICE_KEY}}, "pattern"),
        ({"keys": {"alice": ALICE_KEY}, "quotas": {"carol": {}}}, "carol"),
    ],
)
def test_unusable_key_tables_are_refused_at_start_without_echoing_secrets(config, problem) -> None:
    with pytest.raises(ValidationError, match=problem) as refused:
        AgentKeysConfig.model_validate(config)
    assert ALICE_KEY[:8] not in str(refused.value)


def test_the_admin_token_cannot_also_be_an_agent_key(tmp_path) -> None:
    with pytest.raises(ValidationError, match="equals the admin token") as refused:
        settings(tmp_path, agents=AgentKeysConfig(keys={"alice": ADMIN_TOKEN}))
    assert ADMIN_TOKEN not in str(refused.value)


def test_keys_come_from_the_environment_and_from_a_file(tmp_path, monkeypatch) -> None:
    keys_file = tmp_path / "agent-keys.json"
    keys_file.write_text(json.dumps({"bob": BOB_KEY}))
    monkeypatch.setenv("ROLLGYM_AGENTS__KEYS", json.dumps({"alice": ALICE_KEY}))
    monkeypatch.setenv("ROLLGYM_AGENTS__KEYS_FILE", str(keys_file))
    config = ServerSettings(admin_token=ADMIN_TOKEN, data_dir=tmp_path).agents
    keys = AgentKeys(config)
    assert [keys.identify(f"Bearer {k}").name for k in (ALICE_KEY, BOB_KEY)] == ["alice", "bob"]
    assert ALICE_KEY not in repr(config) and not config.allow_anonymous


async def test_agent_routes_and_admin_routes_take_only_their_own_credential(
    tmp_path, engine
) -> None:
    app = create_app(settings(tmp_path, agents=two_keys()), engine_factory=engine_factory(engine))
    async with in_process(app, agent_key=None) as client:
        missing = await client.post("/v1/sessions", json={"env_id": GUESS})
        admin = await client.post("/v1/chat/completions", json=chat(), headers=ADMIN)
        agent = await client.get("/admin/rollouts", headers=ALICE)
        right = await client.post("/v1/chat/completions", json=chat(), headers=ALICE)
        policy = await client.get("/v1/policy")
    assert missing.status_code == 401 and missing.headers["WWW-Authenticate"] == "Bearer"
    assert missing.json()["error"] == "unauthorized"
    assert admin.status_code == 403 and "not an agent key" in admin.json()["message"]
    assert agent.status_code == 403 and "not the admin token" in agent.json()["message"]
    assert right.status_code == 200 and policy.status_code == 200


# --- quotas in the ledger ---------------------------------------------------------------


def test_sessions_and_sandboxes_are_slots_freed_on_release() -> None:
    ledger = QuotaLedger()
    alice = Agent("alice", AgentQuota(max_sessions=2, max_sandboxes=1))
    first, second = ledger.open_session(alice), ledger.open_session(alice)
    with pytest.raises(QuotaExceeded, match="max_sessions") as refused:
        ledger.open_session(alice)
    assert refused.value.status == 429 and refused.value.retry_after_s > 0
    first.hold_sandbox()
    with pytest.raises(QuotaExceeded, match="max_sandboxes"):
        second.hold_sandbox()
    assert ledger.held("alice") == (2, 1)
    first.release()
    first.release()  # idempotent: a session is released once however it ends
    assert ledger.held("alice") == (1, 0)
    second.hold_sandbox()
    assert ledger.held("bob") == (0, 0)


def test_tokens_per_minute_is_a_sliding_window_with_its_retry_after() -> None:
    clock = Clock()
    refusals: list[tuple[str, str]] = []
    ledger = QuotaLedger(clock=clock, refused=lambda agent, quota: refusals.append((agent, quota)))
    alice = Agent("alice", AgentQuota(tokens_per_minute=100))
    with ledger.reserve_tokens(alice, 80) as hold:
        hold.charge(60)  # the 20 it did not generate are refunded
    clock.now += 20
    with ledger.reserve_tokens(alice, 40) as hold:  # 60 + 40 <= 100
        hold.charge(30)
    clock.now += 10
    with pytest.raises(QuotaExceeded, match="tokens_per_minute: 90 tokens") as refused:
        ledger.reserve_tokens(alice, 20)
    # Room once the first charge (at 1000) leaves the window: at 1060, 30 s on.
    assert refused.value.retry_after_s == 30
    assert refusals == [("alice", "tokens_per_minute")]
    clock.now += 30
    ledger.reserve_tokens(alice, 20).release()
    assert ledger.tokens_used("alice") == 30
    clock.now += 20
    assert ledger.tokens_used("alice") == 0


def test_a_call_reserves_what_it_may_generate_before_it_runs() -> None:
    """Calls running at once cannot together generate more than the quota: each holds its
    max_tokens until it ends; a call over the quota by itself is refused outright."""
    clock = Clock()
    ledger = QuotaLedger(clock=clock)
    alice = Agent("alice", AgentQuota(tokens_per_minute=500))
    running = [ledger.reserve_tokens(alice, 100) for _ in range(5)]
    with pytest.raises(QuotaExceeded, match="500 reserved by running calls") as refused:
        ledger.reserve_tokens(alice, 1)
    assert refused.value.retry_after_s == 1  # nothing to expire: running calls must end
    for hold in running:
        hold.charge(10)
        hold.release()
        hold.release()  # settles once
    assert ledger.tokens_used("alice") == 50
    ledger.reserve_tokens(alice, 450).release()  # the refunds are room again
    with pytest.raises(BadRequest, match="tokens_per_minute of agent 'alice' \\(500\\)"):
        ledger.reserve_tokens(alice, 501)
    with pytest.raises(RuntimeError), ledger.reserve_tokens(alice, 450):
        raise RuntimeError("the engine failed")  # an error refunds the whole reservation
    ledger.reserve_tokens(alice, 450).release()


# --- quotas through the app -----------------------------------------------------------


async def test_over_the_session_quota_is_429_naming_it_until_one_closes(tmp_path, engine) -> None:
    app = create_app(
        settings(tmp_path, agents=two_keys(max_sessions=1)), engine_factory=engine_factory(engine)
    )
    async with in_process(app, agent_key=ALICE_KEY) as client:
        first = (await client.post("/v1/sessions", json={"env_id": GUESS})).json()
        refused = await client.post("/v1/sessions", json={"env_id": GUESS})
        other = await client.post("/v1/sessions", json={"env_id": GUESS}, headers=BOB)
        await client.delete(f"/v1/sessions/{first['session_id']}")
        again = await client.post("/v1/sessions", json={"env_id": GUESS})
        metrics = (await client.get("/metrics")).text
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) > 0
    assert refused.json()["error"] == "quota_exceeded"
    assert "'alice' is over its quota max_sessions" in refused.json()["message"]
    assert other.status_code == 201 and again.status_code == 201
    assert 'rollgym_agent_quota_refusals_total{agent="alice",quota="max_sessions"} 1.0' in metrics


async def test_a_failed_create_and_an_expired_session_give_their_slot_back(
    tmp_path, engine
) -> None:
    config = settings(
        tmp_path,
        agents=two_keys(max_sessions=1),
        sessions=SessionConfig(idle_timeout_s=0.05, sweep_interval_s=0.02),
    )
    app = create_app(config, engine_factory=engine_factory(engine))
    async with in_process(app, agent_key=ALICE_KEY) as client:
        unlisted = await client.post("/v1/sessions", json={"env_id": "nope/Nothing-v0"})
        assert unlisted.status_code == 403
        assert (await client.post("/v1/sessions", json={"env_id": GUESS})).status_code == 201
        await asyncio.sleep(0.3)  # the sweeper expires it
        assert (await client.post("/v1/sessions", json={"env_id": GUESS})).status_code == 201


async def test_one_agent_cannot_take_the_whole_sandbox_pool(tmp_path, engine) -> None:
    """Pool of 2, alice may hold 1: her second sandboxed session is refused at once (not
    left waiting for a box), and bob still gets the other box."""
    pool = FakeSandboxPool(PoolConfig(size=2, health_interval_s=0, acquire_timeout_s=5))
    config = settings(
        tmp_path, agents=two_keys(max_sandboxes=1), sandboxes=SandboxSettings(pool_size=2)
    )
    app = create_app(
        config, engine_factory=engine_factory(engine), pool_factory=lambda settings, sink: pool
    )
    async with in_process(app, agent_key=ALICE_KEY) as client:
        boxed = await client.post("/v1/sessions", json={"env_id": SHELL})
        refused = await client.post("/v1/sessions", json={"env_id": SHELL})
        boxless = await client.post("/v1/sessions", json={"env_id": GUESS})
        bobs = await client.post("/v1/sessions", json={"env_id": SHELL}, headers=BOB)
        quotas = app.state.services.quotas
        assert quotas.held("alice") == (2, 1) and quotas.held("bob") == (1, 1)
        await client.delete(f"/v1/sessions/{boxed.json()['session_id']}")
        again = await client.post("/v1/sessions", json={"env_id": SHELL})
    assert boxed.status_code == 201 and boxless.status_code == 201 and bobs.status_code == 201
    assert refused.status_code == 429 and "max_sandboxes" in refused.json()["message"]
    assert int(refused.headers["Retry-After"]) > 0
    assert again.status_code == 201, again.text


async def test_generated_tokens_are_charged_to_the_key_and_limited_per_minute(
    tmp_path, engine
) -> None:
    """The fake engine answers 2 tokens; alice may generate 2 per minute."""
    app = create_app(
        settings(tmp_path, agents=two_keys(tokens_per_minute=2)),
        engine_factory=engine_factory(engine),
    )
    completion_body = {"model": MODEL, "prompt": "hi", "max_tokens": 2}
    async with in_process(app, agent_key=ALICE_KEY) as client:
        first = await client.post("/v1/chat/completions", json=chat(max_tokens=2))
        refused = await client.post("/v1/chat/completions", json=chat(max_tokens=2))
        completion = await client.post("/v1/completions", json=completion_body)
        bobs = await client.post("/v1/completions", json=completion_body, headers=BOB)
        too_many = await client.post("/v1/chat/completions", json=chat(max_tokens=3), headers=BOB)
    assert first.status_code == 200 and bobs.status_code == 200
    for answer in (refused, completion):
        assert answer.status_code == 429 and answer.json()["error"] == "quota_exceeded"
        assert "tokens_per_minute" in answer.json()["message"]
        assert 1 <= int(answer.headers["Retry-After"]) <= 60
    assert too_many.status_code == 200  # bob's quota is the default one


async def test_concurrent_calls_cannot_generate_more_than_the_quota(tmp_path) -> None:
    """Attack (issue 34): 16 calls at once under a 500-token quota. Checked before and
    charged after, all 16 were admitted and generated 16 x 100 tokens; reserved before they
    run, 5 are admitted and the other 11 get 429 with Retry-After."""
    slow = FakeEngine(lambda prompt: [7] * 100, latency_s=0.2)  # never stops before max_tokens
    app = create_app(
        settings(tmp_path, agents=two_keys(tokens_per_minute=500)),
        engine_factory=engine_factory(slow),
    )
    async with in_process(app, agent_key=ALICE_KEY) as client:
        answers = await asyncio.gather(
            *(client.post("/v1/chat/completions", json=chat(max_tokens=100)) for _ in range(16))
        )
        over = await client.post("/v1/chat/completions", json=chat(max_tokens=501))
    generated = sum(a.json()["usage"]["completion_tokens"] for a in answers if a.status_code == 200)
    assert generated <= 500
    assert sorted(a.status_code for a in answers) == [200] * 5 + [429] * 11
    assert all(int(a.headers["Retry-After"]) >= 1 for a in answers if a.status_code == 429)
    assert over.status_code == 422
    assert "tokens_per_minute of agent 'alice' (500)" in over.json()["message"]


# --- the key's name on the data, and anonymous mode -------------------------------------


async def play_one_episode(client, headers: dict[str, str] | None = None) -> None:
    made = (await client.post("/v1/sessions", json={"env_id": GUESS}, headers=headers)).json()
    sid = made["session_id"]
    answer = await client.post(
        "/v1/chat/completions",
        json={**chat(made["observation"]), "session_id": sid},
        headers=headers,
    )
    action = answer.json()["choices"][0]["message"]["content"]
    await client.post(f"/v1/sessions/{sid}/step", json={"action": action}, headers=headers)
    closed = await client.delete(f"/v1/sessions/{sid}", headers=headers)
    assert closed.json()["persisted"], closed.text


async def recorded_agents(client) -> list[str | None]:
    pulled = await client.post(
        "/admin/buffer/pull",
        json={"trainer_version": 0, "max_staleness": 0, "num_groups": 8, "timeout_s": 0},
        headers=ADMIN,
    )
    groups = PullResponse.model_validate(pulled.json()).groups
    return sorted(t.agent or "" for g in groups for t in g.trajectories)


async def test_the_trajectory_records_the_key_that_played_it(tmp_path, engine) -> None:
    app = create_app(settings(tmp_path, agents=two_keys()), engine_factory=engine_factory(engine))
    async with in_process(app, agent_key=ALICE_KEY) as client:
        await play_one_episode(client)
        await play_one_episode(client, headers=BOB)
        assert await recorded_agents(client) == ["alice", "bob"]


async def test_anonymous_mode_runs_keyless_requests_as_anonymous(tmp_path, engine) -> None:
    agents = AgentKeysConfig(keys={"alice": ALICE_KEY}, allow_anonymous=True)
    app = create_app(settings(tmp_path, agents=agents), engine_factory=engine_factory(engine))
    async with in_process(app, agent_key=None) as client:
        await play_one_episode(client)
        wrong = await client.post("/v1/chat/completions", json=chat(), headers=BOB)
        assert await recorded_agents(client) == [ANONYMOUS]
    assert wrong.status_code == 403  # a wrong key is still refused, never downgraded


async def test_anonymous_mode_is_off_by_default(tmp_path, engine) -> None:
    assert not AgentKeysConfig().allow_anonymous
    app = create_app(settings(tmp_path), engine_factory=engine_factory(engine))
    async with in_process(app, agent_key=None) as client:
        answer = await client.post("/v1/sessions", json={"env_id": GUESS})
    assert answer.status_code == 401
