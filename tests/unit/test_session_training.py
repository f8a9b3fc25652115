"""A group of external-agent sessions trains like a runner group: real GRPO advantages.

The sessions run on the real ``SessionManager`` (a scripted env that pays the number the
fake engine answers); their group, as the buffer hands it out, goes through the trainer's
batch building into one TRL step on the tiny default model, and the advantages TRL computes
are read back. The real twin with the vLLM engine and the real server:
tests/e2e/test_server_e2e.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import torch
from server_fakes import SCRIPTED, ScriptedEnvs, agent_lease, scripted_sessions
from trainer_fakes import FakeServer, scored_batches

from rollgym.contract.wire import PullRequest, SamplingSettings, SessionCreate, TrajectoryGroup
from rollgym.server.buffer.store import TrajectoryBuffer
from rollgym.server.config import BufferConfig
from rollgym.server.conversation.codec import ChatCodec
from rollgym.trainer.batch import build_batch
from rollgym.trainer.config import TrainerConfig
from rollgym.trainer.loop import train

GROUP = 4


async def _session_group(codec: ChatCodec, path: Path) -> TrajectoryGroup:
    """Four sessions on one task, answers "1", "2", "1", "2": rewards 1, 2, 1, 2."""
    async with TrajectoryBuffer(path, BufferConfig()) as buffer:
        sessions = scripted_sessions(
            codec,
            ScriptedEnvs(turns=1, reward_of=lambda seed, action: float(action)),
            buffer,
            answers=["1", "2"],
        )
        request = SessionCreate(env_id=SCRIPTED, seed=3, group_size=GROUP)
        for _ in range(GROUP):
            made = await sessions.create(request, agent_lease())
            messages = [m.model_dump() for m in made.observation]
            generation = await sessions.generate(
                made.session_id, messages, SamplingSettings(max_tokens=8), agent="agent"
            )
            await sessions.step(made.session_id, codec.decode(generation.token_ids), agent="agent")
            await sessions.close(made.session_id)
        pull = PullRequest(trainer_version=0, max_staleness=0, num_groups=1, timeout_s=0)
        response, _ = await buffer.pull(pull, policy_version=0)
    [group] = response.groups
    return group


def test_a_session_group_gets_group_relative_advantages(
    tmp_path, codec, default_model_dir, monkeypatch
) -> None:
    group = asyncio.run(_session_group(codec, tmp_path / "buffer.sqlite3"))
    batch = build_batch([group], GROUP)
    assert batch.trajectory_valid == [True] * GROUP  # no zero-weight padding
    rewards = torch.tensor(batch.trajectory_reward)
    assert sorted(rewards.tolist()) == [1.0, 1.0, 2.0, 2.0]

    fake = FakeServer(producer=None)
    fake.add(group)
    config = TrainerConfig(
        output_dir=tmp_path / "run",
        group_size=GROUP,
        groups_per_batch=1,
        total_steps=1,
        checkpoint_every=1,
        pull_timeout_s=0.1,
        stall_timeout_s=5.0,
    )
    outputs = scored_batches(monkeypatch)
    result = train(config, fake.client(), default_model_dir, printer=None)
    [captured] = outputs

    assert result.steps == 1 and group.group_id in fake.acked
    advantages = captured["advantages"].flatten()
    assert torch.all(advantages.abs() > 0.1)
    assert torch.equal(advantages > 0, rewards > rewards.mean())  # the better episodes gain
    torch.testing.assert_close(advantages.sum(), torch.tensor(0.0), atol=1e-4, rtol=0)
