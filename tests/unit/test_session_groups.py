"""Grouped sessions: G external-agent episodes on one task become one GRPO group.

The manager on a scripted env and a fake engine (a fake clock for the group timeout); the
routes' side (429 + Retry-After, the env failure's 409) in the app, in-process.
"""

from __future__ import annotations

import asyncio

import gymnasium
import pytest
from server_fakes import (
    ADMIN,
    SCRIPTED,
    ScriptedEnvs,
    agent_lease,
    engine_factory,
    in_process,
    scripted_sessions,
    settings,
)

from rollgym.contract.wire import PullRequest, RolloutStatus, SamplingSettings, SessionCreate
from rollgym.server.access.env_access import EnvAccessConfig
from rollgym.server.app import create_app
from rollgym.server.buffer.store import TrajectoryBuffer
from rollgym.server.config import BufferConfig, SessionConfig
from rollgym.server.conversation.codec import ChatCodec
from rollgym.server.errors import BadRequest, Conflict, WindowFull
from rollgym.server.observability.metrics import ServerMetrics
from rollgym.server.sessions.manager import SessionManager

CRASHING = "test/CrashingSession-v0"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def buffer(tmp_path):
    async with TrajectoryBuffer(tmp_path / "b.sqlite3", BufferConfig()) as b:
        yield b


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def metrics() -> ServerMetrics:
    return ServerMetrics()


@pytest.fixture
def sessions(codec, buffer, clock, metrics) -> SessionManager:
    """Answers alternate "1", "2"; the scripted env pays the number: rewards vary."""
    return scripted_sessions(
        codec,
        ScriptedEnvs(turns=1, reward_of=lambda seed, action: float(action)),
        buffer,
        answers=["1", "2"],
        config=SessionConfig(group_timeout_s=60.0, max_staleness=0, groups_per_batch=4),
        metrics=metrics,
        clock=clock,
    )


async def _play(sessions: SessionManager, codec: ChatCodec, session_id: str, opening) -> None:
    """One model turn and the step on its answer."""
    messages = [m.model_dump() for m in opening]
    generation = await sessions.generate(
        session_id, messages, SamplingSettings(max_tokens=8), agent="agent"
    )
    await sessions.step(session_id, codec.decode(generation.token_ids), agent="agent")


async def _pull(buffer: TrajectoryBuffer):
    request = PullRequest(trainer_version=0, max_staleness=0, num_groups=8, timeout_s=0)
    response, _ = await buffer.pull(request, policy_version=0)
    return response.groups


def _count(metrics: ServerMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


async def test_a_group_is_persisted_once_all_its_sessions_closed(sessions, codec, buffer) -> None:
    made = [
        await sessions.create(
            SessionCreate(env_id=SCRIPTED, group_id="mine", group_size=3), agent_lease()
        )
        for _ in range(3)
    ]
    assert len({m.group_id for m in made}) == 1 and {m.group_size for m in made} == {3}
    assert made[0].seed is not None and {m.seed for m in made} == {made[0].seed}  # one task
    assert made[0].group_id != "mine"  # the server's id: a reused client id never collides
    for m in made:
        await _play(sessions, codec, m.session_id, m.observation)
    first = await sessions.close(made[0].session_id)
    second = await sessions.close(made[1].session_id)
    assert (first.persisted, first.group_pending, second.group_pending) == (False, 2, 1)
    assert buffer.depth.total == 0
    last = await sessions.close(made[2].session_id)
    assert last.persisted and last.valid and last.group_pending == 0

    [group] = await _pull(buffer)
    assert group.group_id == made[0].group_id and group.task_seed == made[0].seed
    assert len(group.trajectories) == 3
    assert {t.group_id for t in group.trajectories} == {group.group_id}
    assert all(t.source == "session" for t in group.trajectories)
    assert sorted(t.reward for t in group.trajectories) == [1.0, 1.0, 2.0]


async def test_a_task_key_names_a_group_until_it_is_full(sessions) -> None:
    key = SessionCreate(env_id=SCRIPTED, seed=4, group_size=2)
    a, b, c = [await sessions.create(key, agent_lease()) for _ in range(3)]
    assert a.group_id == b.group_id != c.group_id and a.seed == c.seed == 4
    lone = await sessions.create(SessionCreate(env_id=SCRIPTED, seed=4), agent_lease())
    assert lone.group_size == 1 and lone.group_id == lone.session_id


async def test_a_session_that_does_not_play_its_groups_task_is_refused(sessions) -> None:
    await sessions.create(
        SessionCreate(env_id=SCRIPTED, seed=1, group_id="g", group_size=2), agent_lease()
    )
    with pytest.raises(Conflict, match="seed=1"):
        await sessions.create(
            SessionCreate(env_id=SCRIPTED, seed=2, group_id="g", group_size=2), agent_lease()
        )
    with pytest.raises(Conflict, match="group_size=2"):
        await sessions.create(
            SessionCreate(env_id=SCRIPTED, group_id="g", group_size=3), agent_lease()
        )
    joined = await sessions.create(
        SessionCreate(env_id=SCRIPTED, group_id="g", group_size=2), agent_lease()
    )
    assert joined.seed == 1
    with pytest.raises(ValueError, match="group_id or a seed"):
        SessionCreate(env_id=SCRIPTED, group_size=2)
    with pytest.raises(BadRequest, match="could never fill"):  # max_sessions: 256
        await sessions.create(SessionCreate(env_id=SCRIPTED, seed=1, group_size=257), agent_lease())


async def test_past_the_timeout_a_group_keeps_its_valid_episodes_if_two(
    sessions, codec, buffer, clock, metrics
) -> None:
    made = [
        await sessions.create(
            SessionCreate(env_id=SCRIPTED, group_id="t", group_size=4), agent_lease()
        )
        for _ in range(3)  # the fourth never comes
    ]
    for m in made:
        await _play(sessions, codec, m.session_id, m.observation)
    await sessions.close(made[0].session_id)
    await sessions.close(made[1].session_id)  # the third stays open
    clock.now = 59.0
    assert await sessions.expire_groups() == 0 and buffer.depth.total == 0
    clock.now = 61.0
    assert await sessions.expire_groups() == 1

    [group] = await _pull(buffer)
    assert len(group.trajectories) == 2 and all(t.valid for t in group.trajectories)
    assert await buffer.count_invalid() == 1  # the open one, closed as invalid
    assert len(sessions) == 0
    assert _count(metrics, "rollgym_session_groups_total", outcome="kept") == 1
    # the name is free again: a session with it opens a new group
    again = await sessions.create(
        SessionCreate(env_id=SCRIPTED, group_id="t", group_size=4), agent_lease()
    )
    assert again.group_id != group.group_id


async def test_past_the_timeout_a_group_with_one_valid_episode_is_set_aside(
    sessions, codec, buffer, clock, metrics
) -> None:
    made = [
        await sessions.create(SessionCreate(env_id=SCRIPTED, seed=0, group_size=3), agent_lease())
        for _ in range(2)
    ]
    await _play(sessions, codec, made[0].session_id, made[0].observation)
    await sessions.close(made[0].session_id)
    await _play(sessions, codec, made[1].session_id, made[1].observation)  # left open
    clock.now = 61.0
    await sessions.expire_groups()

    assert await _pull(buffer) == [] and await buffer.count_invalid() == 2
    assert _count(metrics, "rollgym_session_groups_total", outcome="set_aside") == 1
    assert _count(metrics, "rollgym_dropped_trajectories_total", reason="too_few_valid") == 1
    assert _count(metrics, "rollgym_invalid_trajectories_total") == 1


async def test_a_full_window_refuses_new_groups_but_not_their_members(sessions, codec) -> None:
    """Window of 4 groups (max_staleness 0, 4 per batch), counting groups not settled."""
    group = SessionCreate(env_id=SCRIPTED, group_id="g", group_size=2)
    first = await sessions.create(group, agent_lease())
    for _ in range(3):
        await sessions.create(SessionCreate(env_id=SCRIPTED), agent_lease())
    with pytest.raises(WindowFull) as full:
        await sessions.create(SessionCreate(env_id=SCRIPTED), agent_lease())
    assert full.value.status == 429 and full.value.headers() == {"Retry-After": "5"}
    second = await sessions.create(group, agent_lease())  # its group is admitted already
    assert second.group_id == first.group_id
    await sessions.close(first.session_id)  # no model turn: nothing to persist...
    await sessions.close(second.session_id)  # ...the group settles and frees its place
    await sessions.create(SessionCreate(env_id=SCRIPTED), agent_lease())


async def test_a_failed_reset_gives_the_groups_place_back(codec, buffer) -> None:
    sessions = scripted_sessions(
        codec,
        ScriptedEnvs(reset_fails=True),
        buffer,
        config=SessionConfig(max_staleness=0, groups_per_batch=1),
    )
    grouped = SessionCreate(env_id=SCRIPTED, group_id="g", group_size=2)
    for request in (grouped, SessionCreate(env_id=SCRIPTED)):  # not a WindowFull the 2nd time
        with pytest.raises(Conflict, match="failed to reset"):
            await sessions.create(request, agent_lease())


async def test_an_env_that_fails_to_close_still_ends_its_session_and_group(codec, buffer) -> None:
    sessions = scripted_sessions(
        codec,
        ScriptedEnvs(turns=1, reward_of=lambda seed, action: 1.0, close_fails=True),
        buffer,
        answers=["3"],
    )
    made = [
        await sessions.create(SessionCreate(env_id=SCRIPTED, seed=0, group_size=2), agent_lease())
        for _ in range(2)
    ]
    for m in made:
        await _play(sessions, codec, m.session_id, m.observation)
    closed = [await sessions.close(m.session_id) for m in made]
    assert closed[-1].persisted and closed[-1].group_pending == 0 and len(sessions) == 0
    [group] = await _pull(buffer)
    assert len(group.trajectories) == 2


# --- over HTTP ------------------------------------------------------------------------------


async def test_a_full_window_is_a_429_with_retry_after(tmp_path, engine) -> None:
    config = settings(tmp_path, sessions=SessionConfig(max_staleness=0, groups_per_batch=1))
    async with in_process(create_app(config, engine_factory=engine_factory(engine))) as client:
        body = {"env_id": "rollgym/GuessNumber-v0"}
        assert (await client.post("/v1/sessions", json=body)).status_code == 201
        refused = await client.post("/v1/sessions", json=body)
    assert refused.status_code == 429 and refused.headers["retry-after"] == "5"
    assert refused.json()["error"] == "window_full"


async def test_rollouts_and_sessions_share_one_window(client) -> None:
    """A job whose window holds one group: an open session keeps the runner from starting
    one; once the session's group settles, the runner fills the window and sessions wait."""
    session = (await client.post("/v1/sessions", json={"env_id": "rollgym/GuessNumber-v0"})).json()
    job = {
        "env_id": "rollgym/GuessNumber-v0",
        "group_size": 2,
        "groups_per_batch": 1,
        "max_staleness": 0,
        "drop_zero_variance": False,
    }
    assert (await client.post("/admin/rollouts", json=job, headers=ADMIN)).status_code == 200

    async def status() -> RolloutStatus:
        return RolloutStatus.model_validate(
            (await client.get("/admin/rollouts", headers=ADMIN)).json()
        )

    await asyncio.sleep(0.6)  # a few of the runner's admission rounds
    assert (await status()).in_flight == 0 and (await status()).completed_groups == 0
    await client.delete(f"/v1/sessions/{session['session_id']}")  # no turn: nothing stored
    for _ in range(100):
        if (await status()).completed_groups == 1:
            break
        await asyncio.sleep(0.05)
    assert (await status()).completed_groups == 1
    refused = await client.post("/v1/sessions", json={"env_id": "rollgym/GuessNumber-v0"})
    assert refused.status_code == 429 and refused.json()["error"] == "window_full"
    await client.delete("/admin/rollouts", headers=ADMIN)


@pytest.fixture
def crashing_env():
    gymnasium.register(CRASHING, entry_point="server_fakes:ScriptedEnv", kwargs={"crash_on": 1})
    yield CRASHING
    del gymnasium.registry[CRASHING]


async def test_an_env_that_raises_in_a_step_is_a_409_naming_its_error(
    tmp_path, engine, crashing_env
) -> None:
    access = EnvAccessConfig(agent_env_ids=(crashing_env,))
    app = create_app(settings(tmp_path, env_access=access), engine_factory=engine_factory(engine))
    async with in_process(app) as client:
        made = (await client.post("/v1/sessions", json={"env_id": crashing_env})).json()
        sid = made["session_id"]
        await client.post(
            "/v1/chat/completions",
            json={"model": "rollgym-tiny", "messages": made["observation"]},
            headers={"X-Rollgym-Session": sid},
        )
        step = await client.post(f"/v1/sessions/{sid}/step", json={"action": "5"})
        assert step.status_code == 409 and step.json()["error"] == "env_failure"
        assert "the user's env has a bug" in step.json()["message"]
        closed = (await client.delete(f"/v1/sessions/{sid}")).json()
        assert closed["persisted"] and not closed["valid"]
        buffer = app.state.services.buffer
        assert await buffer.count_invalid() == 1 and buffer.depth.total == 0
