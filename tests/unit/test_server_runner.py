"""Rollouts with a scripted policy: token-faithful trajectories, groups, backpressure."""

from __future__ import annotations

import asyncio
import random

import pytest
from server_fakes import SCRIPTED, ScriptedEnvs, guessing_script, wait_for

from rollgym.contract.wire import (
    CurriculumSettings,
    MixedEnv,
    PullRequest,
    RolloutJob,
    SamplingSettings,
)
from rollgym.engine.fake import FakeEngine, fake_logprob
from rollgym.server.buffer.store import TrajectoryBuffer
from rollgym.server.config import BufferConfig, RunnerConfig
from rollgym.server.conversation.codec import ChatCodec
from rollgym.server.errors import NotFound
from rollgym.server.observability.metrics import ServerMetrics
from rollgym.server.rollout.episode import EpisodeRunner, EpisodeSpec
from rollgym.server.rollout.runner import RolloutRunner

GUESS = "rollgym/GuessNumber-v0"


@pytest.fixture(scope="module")
def codec(default_model_dir) -> ChatCodec:
    return ChatCodec.from_model_dir(default_model_dir)


@pytest.fixture
async def buffer(tmp_path):
    async with TrajectoryBuffer(tmp_path / "b.sqlite3", BufferConfig()) as b:
        yield b


def spec(env_id: str = SCRIPTED, seed: int = 0, max_tokens: int = 8) -> EpisodeSpec:
    return EpisodeSpec(
        env_id=env_id,
        env_kwargs={},
        task_seed=seed,
        group_id="g",
        sampling=SamplingSettings(max_tokens=max_tokens),
    )


def answer(codec: ChatCodec, text: str):
    return lambda prompt: [*codec.encode(text), codec.eos_id]


async def test_a_trajectory_holds_the_sampled_ids_and_masks_the_env(codec) -> None:
    engine = FakeEngine(answer(codec, "7"))
    envs = ScriptedEnvs(turns=2, reward_of=lambda seed, action: float(action == "7"))
    episodes = EpisodeRunner(engine, codec, envs, max_model_len=512)
    trajectory = await episodes.run(spec())

    sampled = [*codec.encode("7"), codec.eos_id]
    n = len(sampled)
    env_ids = codec.continuation([{"role": "user", "content": "Step 1 done."}], stopped=True)
    assert trajectory.prompt_ids == codec.first_prompt(
        [
            {"role": "system", "content": "Answer with a number."},
            {"role": "user", "content": "Task 0."},
        ]
    )
    assert trajectory.completion_ids == [*sampled, *env_ids, *sampled]
    assert trajectory.loss_mask == [1] * n + [0] * len(env_ids) + [1] * n
    assert (
        trajectory.logprobs == [fake_logprob(0)] * n + [0.0] * len(env_ids) + [fake_logprob(0)] * n
    )
    assert trajectory.reward == 2.0 and trajectory.terminated and trajectory.valid
    assert [t.env_tokens for t in trajectory.turns] == [len(env_ids), 0]
    assert envs.made[0].actions == ["7", "7"] and envs.made[0].closed
    # each turn's prompt extends the last one: turn 2 is served from the "prefix cache"
    assert engine.prompts[1][: len(engine.prompts[0]) + n] == engine.prompts[0] + sampled
    assert trajectory.turns[1].cached_tokens == len(engine.prompts[0]) + n


async def test_turn_records_carry_env_and_sandbox_time(codec) -> None:
    """The server times the step itself and reads the env's sandbox share beside ``info``."""
    envs = ScriptedEnvs(turns=1, latency_s=0.02)
    trajectory = await EpisodeRunner(
        FakeEngine(answer(codec, "1")), codec, envs, max_model_len=512
    ).run(spec())
    [turn] = trajectory.turns
    assert turn.env_s >= 0.02
    assert 0.01 <= turn.sandbox_s <= turn.env_s / 2  # the fake claims half its own sleep
    assert turn.context_tokens == len(trajectory.prompt_ids)


async def test_an_infrastructure_failure_makes_the_trajectory_invalid_not_zero(codec) -> None:
    envs = ScriptedEnvs(turns=3, fail_on=2, reward_of=lambda s, a: 1.0)
    trajectory = await EpisodeRunner(
        FakeEngine(answer(codec, "1")), codec, envs, max_model_len=512
    ).run(spec())
    assert not trajectory.valid and "the box died" in trajectory.invalid_reason
    assert len(trajectory.turns) == 2 and trajectory.truncated


async def test_a_failed_reset_is_invalid_with_no_turns(codec) -> None:
    envs = ScriptedEnvs(reset_fails=True)
    trajectory = await EpisodeRunner(
        FakeEngine(answer(codec, "1")), codec, envs, max_model_len=512
    ).run(spec())
    assert (
        not trajectory.valid
        and trajectory.turns == []
        and "reset failed" in trajectory.invalid_reason
    )


async def test_a_full_context_truncates_the_episode(codec) -> None:
    envs = ScriptedEnvs(turns=50)
    episodes = EpisodeRunner(FakeEngine(answer(codec, "1")), codec, envs, max_model_len=60)
    trajectory = await episodes.run(spec())
    assert trajectory.truncated and trajectory.valid and not trajectory.terminated
    assert len(trajectory.prompt_ids) + len(trajectory.completion_ids) >= 60


async def test_guess_number_episodes_are_token_faithful(codec) -> None:
    engine = FakeEngine(guessing_script(codec, seed=3))
    episodes = EpisodeRunner(engine, codec, ScriptedEnvs(), max_model_len=1024)
    trajectory = await episodes.run(spec(GUESS, seed=5))
    assert trajectory.valid and (trajectory.terminated or trajectory.truncated)
    spans: list[list[int]] = []  # the runs of model tokens, in order
    for token, mask in zip(trajectory.completion_ids, trajectory.loss_mask, strict=True):
        if mask == 1 and (not spans or spans[-1][-1] == codec.eos_id):
            spans.append([])
        if mask == 1:
            spans[-1].append(token)
    assert len(spans) == len(trajectory.turns)
    for span, turn in zip(spans, trajectory.turns, strict=True):
        assert span[-1] == codec.eos_id and len(span) == turn.completion_tokens
        assert 1 <= int(codec.decode(span)) <= 16


def runner(codec, engine, envs, buffer, **config) -> tuple[RolloutRunner, ServerMetrics]:
    metrics = ServerMetrics()
    episodes = EpisodeRunner(engine, codec, envs, max_model_len=512)
    return RolloutRunner(episodes, buffer, metrics, RunnerConfig(**config), seed=0), metrics


async def test_groups_of_g_per_seed_reach_the_buffer(codec, buffer) -> None:
    rng = random.Random(0)
    envs = ScriptedEnvs(turns=1, reward_of=lambda seed, action: rng.random())
    sampler, metrics = runner(codec, FakeEngine(answer(codec, "3")), envs, buffer)
    job = RolloutJob(
        env_id=SCRIPTED, group_size=3, groups_per_batch=2, max_staleness=0, seeds=[10, 11]
    )
    await sampler.start(job)
    await wait_for(lambda: buffer.depth.ready >= 2)
    status = await sampler.stop()
    response, _ = await buffer.pull(
        PullRequest(trainer_version=0, max_staleness=0, num_groups=2), 0
    )
    for group in response.groups:
        assert len(group.trajectories) == 3
        assert {t.task_seed for t in group.trajectories} == {group.task_seed}
        assert {t.group_id for t in group.trajectories} == {group.group_id}
    assert {g.task_seed for g in response.groups} == {10, 11}
    assert status.completed_groups == 2 and not status.running
    assert metrics.trajectories.labels(source="rollout")._value.get() == 6


async def test_zero_variance_groups_are_dropped_and_counted(codec, buffer) -> None:
    envs = ScriptedEnvs(turns=1, reward_of=lambda seed, action: -1.0)
    sampler, metrics = runner(codec, FakeEngine(answer(codec, "3")), envs, buffer)
    await sampler.start(RolloutJob(env_id=SCRIPTED, group_size=2, groups_per_batch=1))
    await wait_for(lambda: sampler.status().dropped_zero_variance >= 3)
    await sampler.stop()
    assert buffer.depth.total == 0 and sampler.status().completed_groups == 0
    assert metrics.dropped.labels(reason="zero_variance")._value.get() >= 6


async def test_invalid_trajectories_are_excluded_and_counted(codec, buffer) -> None:
    rng = random.Random(1)
    envs = ScriptedEnvs(turns=1, reward_of=lambda seed, action: rng.random())
    sampler, _ = runner(codec, FakeEngine(answer(codec, "3")), envs, buffer)
    envs.env_options["fail_on"] = 1  # every episode's box dies
    await sampler.start(RolloutJob(env_id=SCRIPTED, group_size=2, groups_per_batch=1))
    await wait_for(lambda: sampler.status().invalid_trajectories >= 4)
    status = await sampler.stop()
    assert buffer.depth.total == 0 and status.dropped_too_few_valid >= 2
    assert await buffer.count_invalid() >= 4


async def test_admission_never_exceeds_the_staleness_window(codec, buffer) -> None:
    rng = random.Random(2)
    envs = ScriptedEnvs(turns=1, reward_of=lambda seed, action: rng.random())
    engine = FakeEngine(answer(codec, "3"), latency_s=0.01)
    sampler, _ = runner(codec, engine, envs, buffer)
    job = RolloutJob(env_id=SCRIPTED, group_size=2, groups_per_batch=2, max_staleness=1)
    await sampler.start(job)
    peak = 0
    for _ in range(100):  # the trainer never pulls: the window must fill and stop
        status = sampler.status()
        peak = max(peak, status.in_flight // job.group_size + status.buffered_groups)
        await asyncio.sleep(0.005)
    await sampler.stop(drain=True)
    assert buffer.depth.ready == (1 + 1) * 2  # full, and no more
    assert peak <= (1 + 1) * 2


async def test_a_pull_frees_room_and_the_runner_refills_it(codec, buffer) -> None:
    rng = random.Random(3)
    envs = ScriptedEnvs(turns=1, reward_of=lambda seed, action: rng.random())
    sampler, _ = runner(codec, FakeEngine(answer(codec, "3")), envs, buffer)
    await sampler.start(
        RolloutJob(env_id=SCRIPTED, group_size=2, groups_per_batch=1, max_staleness=0)
    )
    await wait_for(lambda: buffer.depth.ready == 1)
    response, _ = await buffer.pull(
        PullRequest(trainer_version=0, max_staleness=0, num_groups=1), 0
    )
    await buffer.ack([response.groups[0].group_id])
    await wait_for(lambda: sampler.status().completed_groups == 2)
    await sampler.stop()


async def test_a_weight_update_mid_rollout_is_visible_in_versions(codec, buffer) -> None:
    rng = random.Random(4)
    envs = ScriptedEnvs(turns=3, reward_of=lambda seed, action: rng.random())
    engine = FakeEngine(answer(codec, "3"), latency_s=0.02)
    sampler, _ = runner(codec, engine, envs, buffer)
    await sampler.start(RolloutJob(env_id=SCRIPTED, group_size=2, groups_per_batch=4))
    await wait_for(lambda: len(engine.prompts) >= 1)  # first turns under way on version 0
    await engine.swap_weights(None)  # type: ignore[arg-type]
    await wait_for(lambda: buffer.depth.ready >= 4)
    await sampler.stop()
    response, _ = await buffer.pull(
        PullRequest(trainer_version=1, max_staleness=1, num_groups=8), 1
    )
    trajectories = [t for g in response.groups for t in g.trajectories]
    assert any(t.min_version == 0 and t.max_version == 1 for t in trajectories)
    for t in trajectories:  # every turn's logprobs come from that turn's own version
        model_logprobs = [lp for lp, m in zip(t.logprobs, t.loss_mask, strict=True) if m == 1]
        versions = [turn.policy_version for turn in t.turns for _ in range(turn.completion_tokens)]
        assert model_logprobs == [fake_logprob(v) for v in versions]


async def test_an_unknown_env_is_refused_before_anything_runs(codec, buffer) -> None:
    sampler, _ = runner(codec, FakeEngine(answer(codec, "3")), ScriptedEnvs(), buffer)
    with pytest.raises(NotFound):
        await sampler.start(RolloutJob(env_id="nope/Nothing-v0"))
    assert not sampler.status().running


async def test_a_broken_server_invariant_stops_the_job_loudly(codec, buffer) -> None:
    envs = ScriptedEnvs(turns=1, reward_of=lambda seed, action: random.random())
    sampler, _ = runner(codec, FakeEngine(answer(codec, "3")), envs, buffer)
    await buffer.close()  # persisting a group must now fail
    await sampler.start(RolloutJob(env_id=SCRIPTED, group_size=2, groups_per_batch=1))
    await wait_for(lambda: not sampler.status().running)
    assert "closed" in (sampler.status().error or "")
    await sampler.stop()


async def test_a_mixture_draws_each_groups_env_by_weight(codec, buffer) -> None:
    """Groups of a two-env job play one env each, both envs appear, and each group is
    labelled with the env it played (the trainer splits its numbers by that label)."""
    rng = random.Random(0)
    envs = ScriptedEnvs(turns=1, reward_of=lambda seed, action: rng.random())
    sampler, _ = runner(codec, FakeEngine(answer(codec, "3")), envs, buffer)
    job = RolloutJob(
        env_id=SCRIPTED,
        group_size=2,
        groups_per_batch=16,
        max_staleness=0,
        weight=2.0,
        mixture=[MixedEnv(env_id=GUESS, env_kwargs={"low": 1, "high": 4}, weight=2.0)],
        drop_zero_variance=False,  # the fake engine's same guess scores a group alike
    )
    await sampler.start(job)
    await wait_for(lambda: buffer.depth.ready >= 16)
    await sampler.stop()
    response, _ = await buffer.pull(
        PullRequest(trainer_version=0, max_staleness=0, num_groups=16), 0
    )
    played = {g.env_id for g in response.groups}
    assert played == {SCRIPTED, GUESS}
    for group in response.groups:
        assert {t.env_id for t in group.trajectories} == {group.env_id}


@pytest.mark.parametrize("curriculum", [CurriculumSettings(window=1, floor=0.0), None])
async def test_a_curriculum_plays_a_task_that_teaches_nothing_less(
    codec, buffer, curriculum: CurriculumSettings | None
) -> None:
    """Seed 1 scores every sample alike (a flat group: nothing to learn), seed 2 does not.
    With the curriculum (floor 0) seed 1 is played once, then held back; without it, it
    comes back once per pass over the two seeds. One group runs at a time, so each
    finishes before the next seed is chosen."""
    counter = iter(range(1_000_000))

    def reward(seed: int, action: str) -> float:
        return 0.0 if seed == 1 else float(next(counter) % 2)

    envs = ScriptedEnvs(turns=1, reward_of=reward)
    engine = FakeEngine(answer(codec, "3"))
    sampler, _ = runner(codec, engine, envs, buffer, max_concurrent_episodes=2)
    job = RolloutJob(
        env_id=SCRIPTED, group_size=2, groups_per_batch=8, max_staleness=0,
        seeds=[1, 2], curriculum=curriculum,
    )  # fmt: skip
    await sampler.start(job)
    await wait_for(lambda: sampler.status().completed_groups >= 8)
    status = await sampler.stop()
    flat, kept = status.dropped_zero_variance, status.completed_groups
    if curriculum is not None:
        assert (flat, kept) == (1, 8)  # played once, then held back
    else:
        assert flat >= kept - 1  # half the groups


async def test_a_curriculum_holds_back_a_mixtures_solved_env_not_the_seeds_of_the_other(
    codec, buffer
) -> None:
    """Two envs on the same seeds: every group of the first scores alike (it teaches
    nothing), the second's do not. A task is an env and a seed, so after one flat group
    per seed the first env stops being played (floor 0) while the second plays the same
    seeds on: the first env's flat groups are at most its two tasks'. Keyed by seed
    alone, half the groups would still go to the first env (its seeds are admitted again
    by the second's groups) and be dropped flat."""
    counter = iter(range(1_000_000))

    def reward(seed: int, action: str) -> float:
        return float(next(counter) % 2)

    envs = ScriptedEnvs(turns=1, reward_of=reward)
    sampler, _ = runner(
        codec, FakeEngine(answer(codec, "3")), envs, buffer, max_concurrent_episodes=2
    )
    job = RolloutJob(
        env_id=GUESS, env_kwargs={"low": 1, "high": 4}, group_size=2, groups_per_batch=64,
        max_staleness=0, seeds=[1, 2], mixture=[MixedEnv(env_id=SCRIPTED)],
        curriculum=CurriculumSettings(window=1, floor=0.0),
    )  # fmt: skip
    await sampler.start(job)
    await wait_for(lambda: sampler.status().completed_groups >= 12)
    status = await sampler.stop()
    assert status.dropped_zero_variance <= 2


@pytest.mark.parametrize("then", ["nothing", "the same job", "another job"])
async def test_a_resumed_job_keeps_its_curriculums_memory(codec, buffer, tmp_path, then) -> None:
    """A server restart resumes the persisted job with what the curriculum had learnt: seed
    1 (flat) stays held back instead of being played once more. So it does when the trainer,
    restarting from its checkpoint, then sends the same job again; another job (here a wider
    window) starts with an empty memory."""
    counter = iter(range(1_000_000))
    envs = ScriptedEnvs(
        turns=1, reward_of=lambda seed, action: 0.0 if seed == 1 else float(next(counter) % 2)
    )

    def restarted() -> RolloutRunner:
        episodes = EpisodeRunner(FakeEngine(answer(codec, "3")), codec, envs, max_model_len=512)
        config = RunnerConfig(max_concurrent_episodes=2)
        job_path = tmp_path / "job.json"
        return RolloutRunner(episodes, buffer, ServerMetrics(), config, job_path=job_path, seed=0)

    first = restarted()
    # a wide window: nothing pulls, so the groups the first runner makes before it closes
    # use up the window the second one has (with 8, a first runner that made 6 starved it)
    job = RolloutJob(
        env_id=SCRIPTED, group_size=2, groups_per_batch=64, max_staleness=0, seeds=[1, 2],
        curriculum=CurriculumSettings(window=1, floor=0.0),
    )  # fmt: skip
    await first.start(job)
    await wait_for(lambda: first.status().completed_groups >= 3)
    assert first.status().dropped_zero_variance == 1
    await first.close()  # the job stays persisted

    second = restarted()
    await second.resume()
    if then != "nothing":
        await second.start(
            job if then == "the same job" else job.model_copy(update={"groups_per_batch": 128})
        )
    await wait_for(lambda: second.status().completed_groups >= 3)
    await second.stop()
    # seed 1 not played again, unless the memory started empty
    assert second.status().dropped_zero_variance == (1 if then == "another job" else 0)


def test_a_curriculum_needs_a_seed_list() -> None:
    with pytest.raises(ValueError, match="curriculum needs a seed list"):
        RolloutJob(env_id=SCRIPTED, curriculum=CurriculumSettings())


def test_a_mixture_that_names_an_env_twice_is_refused() -> None:
    """Groups and evaluations are kept apart by env id: two variants of one env under one
    id would be reported as one, so the job says to register each under its own."""
    with pytest.raises(ValueError, match="names rollgym/GuessNumber-v0 twice: register"):
        RolloutJob(
            env_id=GUESS,
            env_kwargs={"low": 1, "high": 4},
            mixture=[MixedEnv(env_id=GUESS, env_kwargs={"low": 1, "high": 16})],
        )
