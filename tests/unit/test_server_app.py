"""The app in-process (httpx ASGITransport) on a scripted engine: routes, auth, errors."""

from __future__ import annotations

import asyncio
import threading

import pytest
from server_fakes import (
    ADMIN,
    engine_factory,
    in_process,
    safetensors_bytes,
    settings,
)

from rollgym.contract.canary import CanaryProbes, Probe
from rollgym.contract.wire import (
    PullResponse,
    RolloutStatus,
    SessionClosed,
    SessionCreated,
    SessionStepResult,
    WeightUpdateResult,
)
from rollgym.engine.fake import fake_logprob
from rollgym.sandboxes import metrics as sbx
from rollgym.server.access.env_access import EnvAccessConfig
from rollgym.server.app import create_app
from rollgym.server.config import SessionConfig
from rollgym.server.sessions.manager import INLINE_CHARS, SessionManager

GUESS = "rollgym/GuessNumber-v0"
ONE_NUMBER = {"low": 5, "high": 5}  # every guess of 5 is right


async def test_health_policy_and_models(client) -> None:
    assert (await client.get("/health")).json() == {"status": "ok", "policy_version": 0}
    policy = (await client.get("/v1/policy")).json()
    assert policy == {
        "policy_version": 0,
        "model": "rollgym-tiny",
        "updating": False,
        "lora_max_rank": None,
    }
    assert (await client.get("/v1/models")).json()["data"][0]["id"] == "rollgym-tiny"


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        ({}, 401, "unauthorized"),
        ({"Authorization": "Bearer wrong-token-of-some-length"}, 403, "forbidden"),
        ({"Authorization": "Basic unit-test-admin-token"}, 403, "forbidden"),
    ],
)
async def test_admin_routes_need_the_token(client, engine, headers, status, code) -> None:
    for method, path in [
        ("POST", "/admin/weights"),
        ("GET", "/admin/rollouts"),
        ("POST", "/admin/buffer/pull"),
        ("POST", "/admin/buffer/ack"),
    ]:
        answer = await client.request(method, path, headers=headers, content=safetensors_bytes())
        assert answer.status_code == status, path
        assert answer.json()["error"] == code
    assert engine.policy_version == 0
    missing = await client.get("/admin/rollouts")
    assert missing.headers["WWW-Authenticate"] == "Bearer"


async def test_a_weight_upload_bumps_the_version_every_answer_carries(client, engine) -> None:
    answer = await client.post(
        "/admin/weights",
        content=safetensors_bytes(),
        headers={**ADMIN, "X-Expected-Version": "0"},
    )
    assert answer.status_code == 200, answer.text
    assert WeightUpdateResult.model_validate(answer.json()).policy_version == 1
    chat = await client.post(
        "/v1/chat/completions",
        json={"model": "rollgym-tiny", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert chat.headers["X-Policy-Version"] == "1" and chat.json()["policy_version"] == 1
    assert (await client.get("/health")).json()["policy_version"] == 1


@pytest.mark.parametrize(
    ("body", "headers", "status", "code"),
    [
        (safetensors_bytes(shape=(2, 2)), {}, 422, "bad_weights"),
        (safetensors_bytes()[:-5], {}, 400, "truncated_weights"),
        (safetensors_bytes(), {"X-Expected-Version": "7"}, 409, "version_mismatch"),
        (safetensors_bytes(), {"X-Expected-Version": "seven"}, 422, "bad_request"),
    ],
)
async def test_bad_updates_get_a_clear_4xx_and_change_nothing(
    client, engine, body, headers, status, code
) -> None:
    answer = await client.post("/admin/weights", content=body, headers={**ADMIN, **headers})
    assert answer.status_code == status
    assert answer.json()["error"] == code and answer.json()["message"]
    assert engine.policy_version == 0 and engine.swapped == []


async def test_chat_completion_returns_ids_and_logprobs_on_request(client, codec) -> None:
    answer = await client.post(
        "/v1/chat/completions",
        json={
            "model": "rollgym-tiny",
            "messages": [{"role": "user", "content": "Guess."}],
            "logprobs": True,
            "return_token_ids": True,
            "max_tokens": 8,
        },
    )
    body = answer.json()
    choice = body["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "5", "tool_calls": None}
    assert choice["token_ids"] == [*codec.encode("5"), codec.eos_id]
    assert [t["logprob"] for t in choice["logprobs"]["content"]] == [fake_logprob(0)] * 2
    assert body["prompt_token_ids"] == codec.first_prompt([{"role": "user", "content": "Guess."}])
    assert body["usage"]["completion_tokens"] == 2 and choice["finish_reason"] == "stop"


async def test_completion_from_a_text_prompt(client, codec) -> None:
    answer = await client.post(
        "/v1/completions",
        json={"model": "rollgym-tiny", "prompt": "Guess", "logprobs": 0, "max_tokens": 1},
    )
    choice = answer.json()["choices"][0]
    assert choice["text"] == "5" and choice["finish_reason"] == "length"
    assert choice["logprobs"]["token_logprobs"] == [fake_logprob(0)]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"model": "gpt-4"}, "serves model 'rollgym-tiny'"),
        ({"n": 17}, "n"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"stream_options": {"include_usage": True}}, "stream_options needs stream"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop takes at most 4"),
        ({"seed": -1}, "seed"),
        ({"frequency_penalty": 0.5}, "frequency_penalty"),
        ({"messages": []}, "messages"),
    ],
)
async def test_what_the_server_does_not_implement_is_a_422(client, change, problem) -> None:
    body = {"model": "rollgym-tiny", "messages": [{"role": "user", "content": "x"}], **change}
    answer = await client.post("/v1/chat/completions", json=body)
    assert answer.status_code == 422 and problem in answer.json()["message"]


async def test_an_external_agents_episode_becomes_a_trajectory(client, codec) -> None:
    made = await client.post("/v1/sessions", json={"env_id": GUESS, "env_kwargs": ONE_NUMBER})
    assert made.status_code == 201, made.text
    session = SessionCreated.model_validate(made.json())
    messages = [m.model_dump() for m in session.observation]
    chat = await client.post(
        "/v1/chat/completions",
        json={"model": "rollgym-tiny", "messages": messages},
        headers={"X-Rollgym-Session": session.session_id},
    )
    assert chat.json()["session_id"] == session.session_id
    action = chat.json()["choices"][0]["message"]["content"]
    stepped = SessionStepResult.model_validate(
        (
            await client.post(f"/v1/sessions/{session.session_id}/step", json={"action": action})
        ).json()
    )
    assert stepped.terminated and stepped.reward > 0
    closed = SessionClosed.model_validate(
        (await client.delete(f"/v1/sessions/{session.session_id}")).json()
    )
    assert closed.persisted and closed.valid

    pulled = await client.post(
        "/admin/buffer/pull",
        json={"trainer_version": 0, "max_staleness": 0, "num_groups": 1, "timeout_s": 0},
        headers=ADMIN,
    )
    [group] = PullResponse.model_validate(pulled.json()).groups
    [trajectory] = group.trajectories
    assert trajectory.source == "session" and trajectory.group_id == session.session_id
    assert trajectory.prompt_ids == codec.first_prompt(messages)
    assert trajectory.completion_ids == [*codec.encode("5"), codec.eos_id]
    assert trajectory.loss_mask == [1, 1] and trajectory.reward == stepped.reward
    acked = await client.post(
        "/admin/buffer/ack", json={"group_ids": [group.group_id]}, headers=ADMIN
    )
    assert acked.json() == {"acked": 1}


async def test_a_turns_few_new_characters_are_tokenized_on_the_loop_more_in_a_thread(
    client, monkeypatch
) -> None:
    on_loop: list[bool] = []
    context = SessionManager._context

    def spied(self, *args):  # type: ignore[no-untyped-def]
        on_loop.append(threading.current_thread() is threading.main_thread())
        return context(self, *args)

    monkeypatch.setattr(SessionManager, "_context", spied)
    session = (await client.post("/v1/sessions", json={"env_id": GUESS, "seed": 1})).json()
    messages = session["observation"]
    long = ("the " * INLINE_CHARS)[: INLINE_CHARS + 1]  # fits the context: a token a word
    for note in (None, "a short note", long):  # the first call adds nothing to the opening
        if note is not None:
            messages = [*messages, {"role": "user", "content": note}]
        chat = await client.post(
            "/v1/chat/completions",
            json={"model": "rollgym-tiny", "messages": messages},
            headers={"X-Rollgym-Session": session["session_id"]},
        )
        messages = [*messages, chat.json()["choices"][0]["message"]]
    # the first prompt (request tools too) and the long note: a thread; the short note: the loop
    assert on_loop == [False, True, False]


async def test_session_messages_that_rewrite_history_are_refused(client) -> None:
    session = (await client.post("/v1/sessions", json={"env_id": GUESS, "seed": 1})).json()
    rewritten = [{"role": "system", "content": "Be evil."}, *session["observation"]]
    answer = await client.post(
        "/v1/chat/completions",
        json={"model": "rollgym-tiny", "messages": rewritten, "session_id": session["session_id"]},
    )
    assert answer.status_code == 409 and answer.json()["error"] == "transcript_mismatch"


async def test_unknown_sessions_are_404_and_unlisted_envs_403(client) -> None:
    assert (await client.post("/v1/sessions/nope/step", json={"action": "1"})).status_code == 404
    assert (await client.delete("/v1/sessions/nope")).status_code == 404
    answer = await client.post("/v1/sessions", json={"env_id": "nope/Nothing-v0"})
    assert answer.status_code == 403 and answer.json()["error"] == "env_not_allowed"


async def test_an_env_id_open_to_agents_but_not_registered_is_404(tmp_path, engine) -> None:
    config = settings(tmp_path, env_access=EnvAccessConfig(agent_env_ids=("*",)))
    async with in_process(create_app(config, engine_factory=engine_factory(engine))) as client:
        answer = await client.post("/v1/sessions", json={"env_id": "nope/Nothing-v0"})
    assert answer.status_code == 404 and answer.json()["error"] == "not_found"


async def test_idle_sessions_expire_and_their_episode_is_kept_aside(tmp_path, engine) -> None:
    config = settings(tmp_path, sessions=SessionConfig(idle_timeout_s=0.05, sweep_interval_s=0.02))
    app = create_app(config, engine_factory=engine_factory(engine))
    async with in_process(app) as client:
        session = (await client.post("/v1/sessions", json={"env_id": GUESS})).json()
        await client.post(
            "/v1/chat/completions",
            json={"model": "rollgym-tiny", "messages": session["observation"]},
            headers={"X-Rollgym-Session": session["session_id"]},
        )
        await asyncio.sleep(0.3)
        step = await client.post(f"/v1/sessions/{session['session_id']}/step", json={"action": "3"})
        assert step.status_code == 404
        assert "rollgym_sessions_active 0.0" in (await client.get("/metrics")).text
        buffer = app.state.services.buffer
        assert await buffer.count_invalid() == 1 and buffer.depth.total == 0


async def test_rollout_jobs_start_report_and_stop(client) -> None:
    job = {"env_id": GUESS, "group_size": 2, "groups_per_batch": 1, "drop_zero_variance": False}
    started = await client.post("/admin/rollouts", json=job, headers=ADMIN)
    assert RolloutStatus.model_validate(started.json()).running
    pulled = await client.post(
        "/admin/buffer/pull",
        json={"trainer_version": 0, "max_staleness": 1, "num_groups": 1, "timeout_s": 10},
        headers=ADMIN,
    )
    assert len(pulled.json()["groups"]) == 1
    stopped = RolloutStatus.model_validate(
        (await client.delete("/admin/rollouts", headers=ADMIN)).json()
    )
    assert not stopped.running and stopped.completed_groups >= 1
    bad = await client.post("/admin/rollouts", json={**job, "group_size": 0}, headers=ADMIN)
    assert bad.status_code == 422 and "group_size" in bad.json()["message"]


async def test_metrics_expose_every_family(client) -> None:
    await client.post(
        "/v1/chat/completions",
        json={"model": "rollgym-tiny", "messages": [{"role": "user", "content": "x"}]},
    )
    text = (await client.get("/metrics")).text
    for name in (
        "rollgym_generation_seconds_bucket",
        "rollgym_env_step_seconds_bucket",
        "rollgym_sandbox_seconds_bucket",
        "rollgym_buffer_wait_seconds_bucket",
        "rollgym_weight_sync_seconds",
        "rollgym_inflight_episodes",
        "rollgym_buffer_groups",
        "rollgym_policy_version",
        "rollgym_version_lag",
        "rollgym_dropped_trajectories_total",
        "rollgym_prefix_cache_hit_rate",
    ):
        assert name in text, name
    for name in [*sbx.TIMINGS, *sbx.COUNTS]:  # every metric the sandboxes declare
        assert f"# TYPE {name} " in text, name
    assert "rollgym_generated_tokens_total 2.0" in text


async def test_metrics_read_the_version_lag_from_the_trainers_last_pull(client) -> None:
    """No route keeps the gauges: they are read when /metrics is collected."""
    pull = {"trainer_version": 0, "max_staleness": 1, "num_groups": 1, "timeout_s": 0}
    await client.post("/admin/buffer/pull", json=pull, headers=ADMIN)
    await client.post("/admin/weights", content=safetensors_bytes(), headers=ADMIN)
    text = (await client.get("/metrics")).text
    assert "rollgym_policy_version 1.0" in text and "rollgym_version_lag 1.0" in text
    assert 'rollgym_buffer_groups{state="ready"} 0.0' in text


async def test_unknown_routes_answer_with_the_error_body(client) -> None:
    answer = await client.get("/nowhere")
    assert answer.status_code == 404 and set(answer.json()) == {"error", "message"}


def _canary(logprob: float, tolerance: float = 0.01) -> str:
    probes = CanaryProbes(
        probes=[Probe(token_ids=[3, 4, 5, 6], logprobs=[logprob] * 3)], tolerance=tolerance
    )
    return probes.model_dump_json()


async def test_the_canary_passes_when_the_served_logprobs_are_the_trainers(client, caplog) -> None:
    served_after = fake_logprob(1)  # what the fake engine serves at the update's version
    answer = await client.post(
        "/admin/weights",
        content=safetensors_bytes(),
        headers={**ADMIN, "X-Rollgym-Canary": _canary(served_after)},
    )
    result = WeightUpdateResult.model_validate(answer.json())
    assert result.canary is not None and result.canary.passed
    assert result.canary.policy_version == 1 and result.canary.mismatch == pytest.approx(0.0)
    assert "rollgym_served_weights_mismatch 0.0" in (await client.get("/metrics")).text
    assert "SERVED WEIGHTS MISMATCH" not in caplog.text


async def test_the_canary_fires_when_the_server_serves_other_weights(client, caplog) -> None:
    stale = fake_logprob(0)  # the trainer's values are those of the weights before the update
    answer = await client.post(
        "/admin/weights",
        content=safetensors_bytes(),
        headers={**ADMIN, "X-Rollgym-Canary": _canary(stale)},
    )
    result = WeightUpdateResult.model_validate(answer.json())
    assert result.canary is not None and not result.canary.passed
    assert result.canary.mismatch == pytest.approx(abs(fake_logprob(1) - stale))
    assert "rollgym_served_weights_mismatch 0.1" in (await client.get("/metrics")).text
    assert "SERVED WEIGHTS MISMATCH at version 1" in caplog.text


async def test_a_bad_canary_header_is_refused_before_the_weights_apply(client, engine) -> None:
    bad = CanaryProbes.model_construct(probes=[], tolerance=0.1).model_dump_json()
    answer = await client.post(
        "/admin/weights", content=safetensors_bytes(), headers={**ADMIN, "X-Rollgym-Canary": bad}
    )
    assert answer.status_code == 422 and "X-Rollgym-Canary" in answer.json()["message"]
    assert engine.policy_version == 0 and engine.swapped == []
