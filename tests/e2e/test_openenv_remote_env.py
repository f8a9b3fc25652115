"""An OpenEnv environment as a rollgym env (issue 36, part 2): a server built with
openenv-core in the test (its own ``Environment``, action and observation models, served
by its ``create_fastapi_app`` on uvicorn), played through ``openenv/Remote-v0`` by the
Gymnasium API and by rollgym's episode runner on the real vLLM engine."""

from __future__ import annotations

import os

import pytest
from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State

from rollgym import envs
from rollgym.envs import aio
from rollgym.run.loopback import on_loopback

WORDS = ("apple", "river", "stone", "cloud")


class SayAction(Action):
    text: str


class SayObservation(Observation):
    prompt: str


class SayTheWord(Environment[SayAction, SayObservation, State]):
    """Say the seed's word: 1.0 and done when the text is the word, else a reminder."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._word, self._state = WORDS[0], State()

    def reset(self, seed=None, episode_id=None, **kwargs) -> SayObservation:
        self._word = WORDS[(seed or 0) % len(WORDS)]
        self._state = State(episode_id=episode_id, step_count=0)
        return SayObservation(prompt=f"Say the word {self._word}.")

    def step(self, action: SayAction, timeout_s=None, **kwargs) -> SayObservation:
        self._state.step_count += 1
        if action.text.strip() == self._word:
            return SayObservation(prompt="Yes.", reward=1.0, done=True)
        return SayObservation(prompt=f"No: say {self._word}.", reward=0.0)

    @property
    def state(self) -> State:
        return self._state


def say_the_word_app():
    return create_fastapi_app(SayTheWord, SayAction, SayObservation, max_concurrent_envs=4)


def remote_kwargs(url: str) -> dict[str, str]:
    return {"base_url": url, "action_field": "text", "text_field": "prompt"}


async def test_gymnasiums_api_plays_the_servers_episodes() -> None:
    async with on_loopback(say_the_word_app()) as url:
        env = envs.make("openenv/Remote-v0", **remote_kwargs(url))
        opening, _ = await aio.areset(env, seed=1)
        assert opening == ({"role": "user", "content": "Say the word river."},)
        wrong = await aio.astep(env, "apple")
        assert wrong[:4] == (({"role": "user", "content": "No: say river."},), 0.0, False, False)
        assert wrong[4]["failure"] is None
        right = await aio.astep(env, "river")
        assert right[1:3] == (1.0, True)
        await aio.areset(env, seed=2)
        for _ in range(16):  # the registered turn limit
            *_, truncated, _ = await aio.astep(env, "nothing")
        assert truncated
        env.close()


async def test_a_server_gone_is_an_infrastructure_failure() -> None:
    async with on_loopback(say_the_word_app()) as url:
        env = envs.make("openenv/Remote-v0", message_timeout_s=10, **remote_kwargs(url))
        await aio.areset(env, seed=0)
    _, reward, _, truncated, info = await aio.astep(env, "apple")
    assert (reward, truncated, info["failure"]) == (0.0, True, "infra")
    with pytest.raises(envs.InfraError):
        envs.make("openenv/Remote-v0", **remote_kwargs(url)).reset(seed=0)


async def test_rollgyms_episode_runner_plays_it_unchanged(default_model_dir) -> None:
    from rollgym.contract.wire import SamplingSettings
    from rollgym.engine.config import EngineConfig
    from rollgym.engine.vllm.engine import VLLMEngine
    from rollgym.server.conversation.codec import ChatCodec
    from rollgym.server.rollout.environments import RegistryEnvs
    from rollgym.server.rollout.episode import EpisodeRunner, EpisodeSpec

    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    config = EngineConfig(model_dir=default_model_dir, max_model_len=512, kv_cache_gib=0.5)
    async with on_loopback(say_the_word_app()) as url, VLLMEngine(config) as engine:
        runner = EpisodeRunner(
            engine,
            ChatCodec.from_model_dir(default_model_dir),
            RegistryEnvs(lambda: None),
            max_model_len=512,
        )
        spec = EpisodeSpec(
            env_id="openenv/Remote-v0",
            env_kwargs=remote_kwargs(url),
            task_seed=3,
            group_id="g",
            sampling=SamplingSettings(max_tokens=8),
            max_turns=2,
        )
        trajectory = await runner.run(spec)
    assert trajectory.valid and trajectory.env_id == "openenv/Remote-v0"
    assert len(trajectory.turns) == 2 and all(turn.env_s > 0 for turn in trajectory.turns)
    assert all(turn.sandbox_s == 0 for turn in trajectory.turns)  # the round trip is env time
