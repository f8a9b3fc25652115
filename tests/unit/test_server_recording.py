"""One episode recorder for rollouts and sessions: failures, timings and tokens alike."""

from __future__ import annotations

import math

import pytest
from server_fakes import SCRIPTED, ScriptedEnv, ScriptedEnvs, scripted_sessions

from rollgym.contract.wire import SamplingSettings, SessionCreate
from rollgym.engine.fake import FakeEngine
from rollgym.server.access.agent_keys import Agent, AgentQuota, QuotaLedger
from rollgym.server.buffer.store import TrajectoryBuffer
from rollgym.server.config import BufferConfig
from rollgym.server.conversation.codec import ChatCodec
from rollgym.server.conversation.recording import step_env
from rollgym.server.errors import Conflict, EnvFailure
from rollgym.server.rollout.episode import EpisodeRunner, EpisodeSpec


@pytest.fixture(scope="module")
def codec(default_model_dir) -> ChatCodec:
    return ChatCodec.from_model_dir(default_model_dir)


@pytest.fixture
async def buffer(tmp_path):
    async with TrajectoryBuffer(tmp_path / "b.sqlite3", BufferConfig()) as b:
        yield b


def engine(codec: ChatCodec) -> FakeEngine:
    return FakeEngine(lambda prompt: [*codec.encode("7"), codec.eos_id])


async def test_a_crashing_step_is_an_infrastructure_failure_with_its_time() -> None:
    env = ScriptedEnv(crash_on=1, latency_s=0.01)
    env.reset(seed=0)
    step = await step_env(env, "7")
    assert step.truncated and step.reward == 0.0 and step.observation == []
    assert step.infra_error is not None and "the user's env has a bug" in step.infra_error
    assert step.env_s >= 0.01


@pytest.mark.parametrize("reward", [math.nan, math.inf, -math.inf])
async def test_a_non_finite_reward_is_an_infrastructure_failure(reward: float) -> None:
    env = ScriptedEnv(reward_of=lambda seed, action: reward)
    env.reset(seed=0)
    step = await step_env(env, "7")
    assert step.reward == 0.0 and step.truncated
    assert step.infra_error == f"the env returned reward {reward}"


async def test_a_crashing_env_makes_the_rollout_episode_invalid(codec) -> None:
    runner = EpisodeRunner(
        engine(codec), codec, ScriptedEnvs(turns=3, crash_on=2), max_model_len=512
    )
    spec = EpisodeSpec(SCRIPTED, {}, 0, "g", SamplingSettings(max_tokens=8))
    trajectory = await runner.run(spec)
    assert not trajectory.valid and "the user's env has a bug" in (trajectory.invalid_reason or "")
    assert len(trajectory.turns) == 2 and trajectory.truncated


async def test_a_crashing_env_makes_the_session_invalid_and_the_step_a_4xx(codec, buffer) -> None:
    sessions = scripted_sessions(codec, ScriptedEnvs(turns=3, crash_on=2), buffer, answers=["7"])
    lease = QuotaLedger().open_session(Agent("agent", AgentQuota()))
    made = await sessions.create(SessionCreate(env_id=SCRIPTED, seed=0), lease)
    conversation = [dict(m) for m in made.observation]
    generation = await sessions.generate(
        made.session_id, conversation, SamplingSettings(max_tokens=8), agent="agent"
    )
    answer = codec.decode(generation.token_ids)
    result = await sessions.step(made.session_id, answer, agent="agent")
    conversation += [{"role": "assistant", "content": answer}, *map(dict, result.observation)]
    await sessions.generate(
        made.session_id, conversation, SamplingSettings(max_tokens=8), agent="agent"
    )
    with pytest.raises(EnvFailure) as failure:  # the route answers 409 env_failure
        await sessions.step(made.session_id, answer, agent="agent")
    assert failure.value.status == 409 and "the user's env has a bug" in str(failure.value)
    with pytest.raises(Conflict):  # the episode is over
        await sessions.step(made.session_id, answer, agent="agent")
    closed = await sessions.close(made.session_id)
    assert closed.persisted and not closed.valid
    assert await buffer.count_invalid() == 1 and buffer.depth.total == 0
