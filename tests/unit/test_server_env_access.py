"""Agents reach only what the operator opens: the pure check, and what sessions record."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from server_fakes import ADMIN, engine_factory, in_process, settings

from rollgym.contract.wire import PullResponse
from rollgym.engine.fake import FakeEngine
from rollgym.server.access.env_access import EnvAccessConfig, check_request
from rollgym.server.app import create_app
from rollgym.server.conversation.codec import ChatCodec
from rollgym.server.errors import EnvNotAllowed

GUESS = "rollgym/GuessNumber-v0"
MODEL = "rollgym-tiny"


@pytest.mark.parametrize(
    ("access", "env_id", "kwargs", "problem"),
    [
        (EnvAccessConfig(), "user/Mine-v0", {}, "may not open"),
        (EnvAccessConfig(), "os:Env-v0", {}, "module"),
        (EnvAccessConfig(agent_env_ids=("*",)), "os:Env-v0", {}, "module"),
        (EnvAccessConfig(allow_module_ids=True), "pkg:Env-v0", {}, "may not open"),
        (EnvAccessConfig(), GUESS, {"secret": 1}, "does not take ['secret']"),
        (EnvAccessConfig(), "rollgym/Shell-v0", {"low": 1}, "declared: none"),
        (EnvAccessConfig(agent_env_ids=("*",)), GUESS, {"task_file": "/etc/passwd"}, "never"),
    ],
)
def test_agents_get_only_listed_envs_and_declared_kwargs(access, env_id, kwargs, problem) -> None:
    with pytest.raises(EnvNotAllowed, match=problem.replace("[", r"\[").replace("]", r"\]")):
        check_request(access, env_id, kwargs, lane="agent")


@pytest.mark.parametrize(
    ("access", "env_id", "kwargs"),
    [
        (EnvAccessConfig(), GUESS, {"low": 1, "high": 8}),
        (EnvAccessConfig(agent_env_ids=("*",)), "user/Mine-v0", {}),
        (EnvAccessConfig(agent_env_ids=("pkg:Env-v0",), allow_module_ids=True), "pkg:Env-v0", {}),
        (EnvAccessConfig(), "reasoning_gym/chain_sum", {}),
        (
            EnvAccessConfig(agent_env_ids=("user/Mine-v0",), agent_kwargs={"user/Mine-v0": ("n",)}),
            "user/Mine-v0",
            {"n": 3},
        ),
    ],
)
def test_what_the_operator_opens_passes(access, env_id, kwargs) -> None:
    check_request(access, env_id, kwargs, lane="agent")


def test_the_admin_lane_takes_any_id_but_never_the_reserved_kwargs() -> None:
    access = EnvAccessConfig(agent_env_ids=())
    check_request(access, "bench.trainer:SlowGuessNumber-v0", {"latency_s": 0.5}, lane="admin")
    for reserved in ("sandbox_pool", "task_file", "tasks", "step_reward", "max_episode_steps"):
        with pytest.raises(EnvNotAllowed, match=reserved):
            check_request(access, GUESS, {reserved: None}, lane="admin")


def test_the_operator_cannot_open_a_reserved_kwarg_to_agents() -> None:
    with pytest.raises(ValidationError, match="never come from a request"):
        EnvAccessConfig(agent_kwargs={GUESS: ("low", "task_file")})


@pytest.fixture(scope="module")
def codec(default_model_dir) -> ChatCodec:
    return ChatCodec.from_model_dir(default_model_dir)


@pytest.fixture
async def client(tmp_path, codec):
    engine = FakeEngine(lambda prompt: [*codec.encode("3"), codec.eos_id])
    app = create_app(settings(tmp_path), engine_factory=engine_factory(engine))
    async with in_process(app) as client:
        yield client


async def _episode(client, kwargs: dict[str, int], action: str | None) -> dict:
    """One session: one model call, then a step on ``action`` (None: the model's answer)."""
    made = (await client.post("/v1/sessions", json={"env_id": GUESS, "env_kwargs": kwargs})).json()
    sid = made["session_id"]
    answer = await client.post(
        "/v1/chat/completions",
        json={"model": MODEL, "messages": made["observation"], "session_id": sid},
    )
    said = answer.json()["choices"][0]["message"]["content"]
    step = await client.post(f"/v1/sessions/{sid}/step", json={"action": action or said})
    await client.delete(f"/v1/sessions/{sid}")
    pulled = await client.post(
        "/admin/buffer/pull",
        json={"trainer_version": 0, "max_staleness": 0, "num_groups": 1, "timeout_s": 0},
        headers=ADMIN,
    )
    [group] = PullResponse.model_validate(pulled.json()).groups
    return {"step": step.json(), "trajectory": group.trajectories[0]}


async def test_an_agents_own_action_earns_the_model_nothing(client, codec) -> None:
    # The agent picks an easy task (low = high = 7), asks the model (which says 3), then
    # steps with its own right answer: the env pays it, the model's tokens get no credit.
    forged = await _episode(client, {"low": 7, "high": 7}, action="7")
    assert forged["step"]["reward"] > 0 and forged["step"]["terminated"]
    trajectory = forged["trajectory"]
    assert trajectory.reward == 0.0 and trajectory.turns[0].reward == 0.0
    assert trajectory.env_kwargs == {"low": 7, "high": 7}
    ids, mask = trajectory.completion_ids, trajectory.loss_mask
    model_tokens = [t for t, m in zip(ids, mask, strict=True) if m]
    assert model_tokens == [*codec.encode("3"), codec.eos_id]


async def test_the_models_own_answer_earns_its_reward(client) -> None:
    honest = await _episode(client, {"low": 3, "high": 3}, action=None)
    assert honest["trajectory"].reward == honest["step"]["reward"] > 0
    assert honest["trajectory"].env_kwargs == {"low": 3, "high": 3}


async def test_a_session_whose_context_is_full_is_over_and_marked(tmp_path, codec) -> None:
    engine = FakeEngine(lambda prompt: [*codec.encode("3" * 40), codec.eos_id])
    config = settings(tmp_path, engine={"max_model_len": 160})  # the opening is 64 tokens
    async with in_process(create_app(config, engine_factory=engine_factory(engine))) as client:
        made = await client.post("/v1/sessions", json={"env_id": GUESS})
        assert made.status_code == 201 and "cut by the context" in made.json()["warnings"][0]
        session = made.json()
        messages, sid = list(session["observation"]), session["session_id"]
        for _ in range(10):
            answer = await client.post(
                "/v1/chat/completions",
                json={"model": MODEL, "messages": messages, "session_id": sid},
            )
            if answer.status_code != 200:
                break
            said = answer.json()["choices"][0]["message"]["content"]
            step = (await client.post(f"/v1/sessions/{sid}/step", json={"action": said})).json()
            messages += [{"role": "assistant", "content": said}, *step["observation"]]
        assert answer.status_code == 409 and answer.json()["error"] == "context_full"
        closed = (await client.delete(f"/v1/sessions/{sid}")).json()
        assert closed["persisted"] and closed["valid"]
        pulled = await client.post(
            "/admin/buffer/pull",
            json={"trainer_version": 0, "max_staleness": 0, "num_groups": 1, "timeout_s": 0},
            headers=ADMIN,
        )
        [trajectory] = PullResponse.model_validate(pulled.json()).groups[0].trajectories
        assert (
            trajectory.truncated_by_context and trajectory.truncated and len(trajectory.turns) == 2
        )
        metrics = (await client.get("/metrics")).text
        assert 'rollgym_truncated_by_context_total{source="session"} 1.0' in metrics
