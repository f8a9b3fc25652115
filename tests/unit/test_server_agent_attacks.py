"""Agent to agent: one key cannot read, step, drive or close another key's session.

Bob knows the id of Alice's session (ids leak: logs, a shared proxy). Every way in answers
404, exactly as for a session that does not exist, with none of the session's data, and
Alice's episode goes on untouched and is recorded as hers.
"""

from __future__ import annotations

import pytest
from server_fakes import ADMIN, engine_factory, in_process, settings

from rollgym.contract.wire import PullResponse
from rollgym.server.access.agent_keys import AgentKeysConfig
from rollgym.server.app import create_app

GUESS = "rollgym/GuessNumber-v0"
MODEL = "rollgym-tiny"
ALICE_KEY, BOB_KEY = "alice-secret-key-0001", "bob-secret-key-000002"
BOB = {"Authorization": f"Bearer {BOB_KEY}"}


@pytest.fixture
async def alice(tmp_path, engine):
    """A client as Alice on an app that also knows Bob, and Alice's open session."""
    agents = AgentKeysConfig(keys={"alice": ALICE_KEY, "bob": BOB_KEY})
    app = create_app(settings(tmp_path, agents=agents), engine_factory=engine_factory(engine))
    async with in_process(app, agent_key=ALICE_KEY) as client:
        made = await client.post("/v1/sessions", json={"env_id": GUESS, "seed": 7})
        yield client, made.json()


def bobs_attempts(session: dict[str, object]) -> list[tuple[str, str, dict[str, object], dict]]:
    sid = str(session["session_id"])
    chat = {"model": MODEL, "messages": session["observation"]}
    return [
        ("POST", f"/v1/sessions/{sid}/step", {"action": "1"}, {}),
        ("POST", "/v1/chat/completions", chat, {"X-Rollgym-Session": sid}),
        ("POST", "/v1/chat/completions", {**chat, "session_id": sid}, {}),
        ("DELETE", f"/v1/sessions/{sid}", {}, {}),
    ]


async def test_another_key_sees_the_session_as_absent(alice) -> None:
    client, session = alice
    sid = session["session_id"]
    absent = await client.post("/v1/sessions/no-such-session/step", json={"action": "1"})
    for method, path, body, headers in bobs_attempts(session):
        answer = await client.request(method, path, json=body or None, headers={**BOB, **headers})
        assert answer.status_code == 404, (method, path, answer.text)
        assert answer.json()["error"] == absent.json()["error"] == "not_found"
        assert answer.json()["message"] == absent.json()["message"].replace("no-such-session", sid)
        assert "Task" not in answer.text and "guess" not in answer.text.lower()


async def test_the_owners_episode_goes_on_untouched_and_is_recorded_as_hers(alice) -> None:
    client, session = alice
    for method, path, body, headers in bobs_attempts(session):
        await client.request(method, path, json=body or None, headers={**BOB, **headers})
    sid = session["session_id"]
    chat = {"model": MODEL, "messages": session["observation"], "session_id": sid}
    answer = await client.post("/v1/chat/completions", json=chat)
    action = answer.json()["choices"][0]["message"]["content"]
    step = await client.post(f"/v1/sessions/{sid}/step", json={"action": action})
    closed = await client.delete(f"/v1/sessions/{sid}")
    assert step.status_code == 200 and closed.json()["valid"]
    pulled = await client.post(
        "/admin/buffer/pull",
        json={"trainer_version": 0, "max_staleness": 0, "num_groups": 1, "timeout_s": 0},
        headers=ADMIN,
    )
    [group] = PullResponse.model_validate(pulled.json()).groups
    [trajectory] = group.trajectories
    assert trajectory.agent == "alice" and len(trajectory.turns) == 1
    assert trajectory.messages[-2].content == action  # Bob's "1" never reached the env


@pytest.mark.parametrize(
    "name",
    [{"group_id": "team"}, {"seed": 3}],  # the agent's id for it, or the task key
    ids=["group_id", "task key"],
)
async def test_a_group_name_belongs_to_the_key_that_opened_it(alice, name) -> None:
    """Attack (issue 34): Bob opens a group under a name first, as a squatter would. Alice's
    sessions with that name never join his group (hers would wait in it for the timeout,
    and her episodes would be compared with his): each key gets a group of its own."""
    client, _ = alice
    body = {"env_id": GUESS, "group_size": 2, **name}
    bobs = await client.post("/v1/sessions", json=body, headers=BOB)
    hers = [await client.post("/v1/sessions", json=body) for _ in range(2)]
    bobs_second = await client.post("/v1/sessions", json=body, headers=BOB)
    assert {a.status_code for a in (bobs, *hers, bobs_second)} == {201}
    groups = [a.json()["group_id"] for a in (bobs, *hers, bobs_second)]
    assert groups[1] == groups[2] and groups[0] == groups[3] and groups[0] != groups[1]
    closed = [await client.delete(f"/v1/sessions/{m.json()['session_id']}") for m in hers]
    assert [c.json()["group_pending"] for c in closed] == [1, 0]  # hers alone settle it
