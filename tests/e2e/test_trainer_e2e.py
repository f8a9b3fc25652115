"""The trainer against the real twin of its fake: ``rollgym serve`` (vLLM engine) on loopback.

One server for the module. The proof that the server samples from exactly the trainer's
weights: the behaviour logprobs it records for a fresh episode equal the logprobs the
trainer's checkpointed model assigns to the same tokens.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch
from grpo_probe import assert_advantages_follow_rewards, probe_steps
from transformers import AutoModelForCausalLM

from rollgym.contract.wire import (
    PullRequest,
    RolloutJob,
    SamplingSettings,
    SessionClosed,
    SessionCreated,
    Trajectory,
)
from rollgym.run.server_process import ServerProcess, free_port
from rollgym.trainer.checkpoint import latest_checkpoint
from rollgym.trainer.client import ServerClient
from rollgym.trainer.config import BroadcastConfig, TrainerConfig
from rollgym.trainer.errors import ServerUnavailable
from rollgym.trainer.loop import train
from rollgym.trainer.lora import LoraSettings, load_policy
from rollgym.trainer.weights import WeightPusher

GROUP_SIZE, GROUPS = 4, 2
MODEL = "rollgym-tiny"
AGENT_KEY = "e2e-agent-key-0123456789"


def _serve(root: Path, model_dir: Path, **settings: str) -> ServerProcess:
    """A ``rollgym serve`` of the default model on one thread, with ``settings`` added."""
    return ServerProcess(
        model_dir=model_dir,
        data_dir=root / "server",
        threads=1,
        settings={"ROLLGYM_ENGINE__MAX_MODEL_LEN": "1024", **settings},
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory, default_model_dir) -> Iterator[ServerProcess]:
    settings = {
        "ROLLGYM_BUFFER__LEASE_TIMEOUT_S": "5",
        "ROLLGYM_AGENTS__KEYS": json.dumps({"e2e": AGENT_KEY}),
    }
    with _serve(tmp_path_factory.mktemp("trainer-e2e"), default_model_dir, **settings) as process:
        yield process


@pytest.fixture
def client(server) -> Iterator[ServerClient]:
    with ServerClient(server.client_config()) as client:
        yield client
        client.stop_rollouts()


def _job() -> RolloutJob:
    # The untrained model rarely plays valid moves, so equal rewards are common: keep them.
    return RolloutJob(
        env_id="rollgym/GuessNumber-v0",
        env_kwargs={"low": 1, "high": 8},
        group_size=GROUP_SIZE,
        groups_per_batch=GROUPS,
        max_staleness=1,
        max_turns=2,
        sampling=SamplingSettings(temperature=1.0, max_tokens=4),
        drop_zero_variance=False,
    )


def _config(output_dir: Path, steps: int) -> TrainerConfig:
    return TrainerConfig(
        output_dir=output_dir,
        group_size=GROUP_SIZE,
        groups_per_batch=GROUPS,
        max_staleness=1,
        total_steps=steps,
        learning_rate=1e-3,
        pull_timeout_s=5.0,
        stall_timeout_s=240.0,
    )


def _train_on_rollouts(config: TrainerConfig, client: ServerClient, model_dir: Path):
    """``train`` against the server, with ``_job``'s rollouts started once it is ready."""
    return train(
        config, client, model_dir, on_ready=lambda: client.start_rollouts(_job()), printer=None
    )


def _fresh_episode(client: ServerClient, version: int) -> Trajectory:
    """An episode sampled entirely at ``version`` (the buffer may hold older ones)."""
    for _ in range(20):
        answer = client.pull(
            PullRequest(trainer_version=version, max_staleness=0, num_groups=1, timeout_s=30)
        )
        client.ack([g.group_id for g in answer.groups])
        for group in answer.groups:
            if group.min_version == group.trajectories[0].max_version == version:
                return group.trajectories[0]
    pytest.fail(f"no episode sampled at version {version}")


def _assert_served_weights_are(checkpoint: Path, episode: Trajectory) -> None:
    model = load_policy(checkpoint).eval()  # a whole model, or a LoRA run's base + adapter
    ids = torch.tensor([episode.prompt_ids + episode.completion_ids])
    with torch.no_grad():
        logps = model(ids).logits[0, :-1].log_softmax(-1)
    start = len(episode.prompt_ids) - 1
    positions = [i for i, m in enumerate(episode.loss_mask) if m]
    ours = [float(logps[start + i, episode.completion_ids[i]]) for i in positions]
    theirs = [episode.logprobs[i] for i in positions]
    torch.testing.assert_close(torch.tensor(theirs), torch.tensor(ours), atol=2e-3, rtol=0)


def test_grpo_steps_push_weights_the_server_then_samples_from(
    client, default_model_dir, tmp_path
) -> None:
    start = client.policy_version()
    config = _config(tmp_path / "run", steps=3)
    result = _train_on_rollouts(config, client, default_model_dir)
    assert result.steps == 3
    assert result.policy_version == client.policy_version() == start + 4  # start + 3 steps
    assert [r.policy_version for r in result.records] == [start + 2, start + 3, start + 4]
    assert all(r.version_lag_max <= 1 for r in result.records)  # the staleness window held
    assert all(r.trajectories == GROUP_SIZE * GROUPS for r in result.records)
    # TRL's importance-sampling ratio, exp(trainer's logprob at the step's start - server's),
    # is 1 only for samples of the trainer's own version: a sample one version old carries
    # the last step's change (0.90 seen when that step's rewards differed; exactly 1 when
    # they were all equal, advantages 0, so the weights did not move). So the check is on
    # the steps that took only fresh samples; the first step always does (the trainer pushes
    # its weights before the job starts), and the fresh episode below checks the last one.
    key = "sampling/importance_sampling_ratio/mean"
    ratios = [log[key] for log in result.trl_logs if key in log]
    assert len(ratios) == 3, ratios
    assert result.records[0].version_lag_max == 0, "the first step took samples of older weights"
    fresh = [r for r, rec in zip(ratios, result.records, strict=True) if rec.version_lag_max == 0]
    assert all(abs(r - 1.0) < 5e-3 for r in fresh), ratios
    _assert_served_weights_are(
        latest_checkpoint(config.output_dir), _fresh_episode(client, result.policy_version)
    )


def _play_session_group(http: httpx.Client, seed: int) -> list[SessionClosed]:
    """``GROUP_SIZE`` external-agent sessions on one task (a task key). The agents stop after
    one or two turns, in turn: the untrained model's guesses are nearly all invalid (-0.1
    each), so this is what makes the returns of a group differ."""
    task = {"env_id": "rollgym/GuessNumber-v0", "env_kwargs": {"low": 1, "high": 4}}
    made = [
        SessionCreated.model_validate(
            http.post("/v1/sessions", json={**task, "seed": seed, "group_size": GROUP_SIZE}).json()
        )
        for _ in range(GROUP_SIZE)
    ]
    assert len({m.group_id for m in made}) == 1
    closed = []
    for index, session in enumerate(made):
        messages = [m.model_dump() for m in session.observation]
        for _ in range(1 + index % 2):
            answer = http.post(
                "/v1/chat/completions",
                json={"model": MODEL, "messages": messages, "max_tokens": 4, "temperature": 1.0},
                headers={"X-Rollgym-Session": session.session_id},
            ).json()
            action = answer["choices"][0]["message"]["content"]
            messages.append({"role": "assistant", "content": action})
            step = http.post(f"/v1/sessions/{session.session_id}/step", json={"action": action})
            messages += step.json()["observation"]
            if step.json()["terminated"] or step.json()["truncated"]:
                break
        closed.append(
            SessionClosed.model_validate(http.delete(f"/v1/sessions/{session.session_id}").json())
        )
    return closed


def test_grouped_sessions_reach_a_grpo_step(
    server, client, default_model_dir, tmp_path, monkeypatch
) -> None:
    """External agents' sessions, in groups, are what the trainer pulls and trains on."""
    left_over = PullRequest(
        trainer_version=client.policy_version(), max_staleness=8, num_groups=64, timeout_s=0
    )
    client.ack([g.group_id for g in client.pull(left_over).groups])  # earlier tests' groups
    agent = {"Authorization": f"Bearer {AGENT_KEY}"}
    with httpx.Client(base_url=server.url, headers=agent, timeout=60) as http:
        closed = [c for seed in range(GROUPS) for c in _play_session_group(http, seed)]
    lasts = closed[GROUP_SIZE - 1 :: GROUP_SIZE]
    assert all(c.persisted and c.group_pending == 0 for c in lasts)

    probe = probe_steps(monkeypatch)
    start = client.policy_version()
    result = train(_config(tmp_path / "run", steps=1), client, default_model_dir, printer=None)

    assert result.steps == 1 and client.policy_version() == start + 2  # start weights + 1 step
    [batch], [output] = probe.batches, probe.outputs
    assert set(batch.group_id) == {c.group_id for c in closed}  # the sessions' groups, all
    assert all(batch.trajectory_valid)  # G sessions each: no zero-weight padding
    assert_advantages_follow_rewards(batch, output, GROUPS, GROUP_SIZE)


def test_a_restart_brings_the_server_back_to_the_checkpoint(
    client, default_model_dir, tmp_path
) -> None:
    config = _config(tmp_path / "run", steps=2)
    _train_on_rollouts(config, client, default_model_dir)
    checkpoint = latest_checkpoint(config.output_dir)
    # Someone moved the server on meanwhile (another writer, or a crash after a later push).
    model = AutoModelForCausalLM.from_pretrained(default_model_dir, dtype="float32")
    WeightPusher(client, version=client.policy_version()).push(model)
    moved_to = client.policy_version()

    resumed = train(config, client, default_model_dir, printer=None)  # nothing left to train
    assert resumed.resumed_from == checkpoint and resumed.steps == 2
    assert resumed.policy_version == moved_to + 1 == client.policy_version()
    _assert_served_weights_are(checkpoint, _fresh_episode(client, resumed.policy_version))


@pytest.fixture(scope="module")
def adapter_server(tmp_path_factory, default_model_dir) -> Iterator[ServerProcess]:
    """A server that serves LoRA adapters on the default model (``engine.lora``)."""
    root = tmp_path_factory.mktemp("trainer-e2e-lora")
    with _serve(root, default_model_dir, ROLLGYM_ENGINE__LORA__MAX_RANK="8") as process:
        yield process


@pytest.mark.parametrize("serve", ["merged", "adapter"])
def test_a_lora_run_serves_the_trainers_policy_merged_or_as_adapters(
    request, default_model_dir, tmp_path, serve
) -> None:
    """The real twin of tests/unit/test_trainer_lora.py's fake server: every push's canary
    passes on the real engine, and a fresh episode's behaviour logprobs are the
    checkpoint's (base + adapter) own."""
    server = request.getfixturevalue("server" if serve == "merged" else "adapter_server")
    config = _config(tmp_path / "run", steps=3).model_copy(
        update={"lora": LoraSettings(rank=8, serve=serve), "learning_rate": 2e-2}
    )
    checkpoint = _three_steps_on_served_weights(server, config, default_model_dir)
    assert (checkpoint / "adapter_config.json").is_file()


def _three_steps_on_served_weights(server: ServerProcess, config: TrainerConfig, model_dir: Path):
    """A 3-step run against ``server``: every push's canary passes and a fresh episode's
    behaviour logprobs are the last checkpoint's own; that checkpoint."""
    with ServerClient(server.client_config()) as client:
        start = client.policy_version()
        result = _train_on_rollouts(config, client, model_dir)
        try:
            episode = _fresh_episode(client, result.policy_version)
        finally:
            client.stop_rollouts()
    assert result.steps == 3 and result.policy_version == start + 4
    mismatches = [r.alarms["served_weights_mismatch"] for r in result.records]
    assert all(0 <= m < 2e-3 for m in mismatches), mismatches
    checkpoint = latest_checkpoint(config.output_dir)
    assert checkpoint is not None
    _assert_served_weights_are(checkpoint, episode)
    return checkpoint


@pytest.fixture(scope="module")
def broadcast_server(tmp_path_factory, default_model_dir) -> Iterator[ServerProcess]:
    """A server that receives weights by broadcast, gloo on CPU (``engine.weight_transfer``)."""
    root = tmp_path_factory.mktemp("trainer-e2e-gloo")
    with _serve(root, default_model_dir, ROLLGYM_ENGINE__WEIGHT_TRANSFER="gloo") as process:
        yield process


def test_a_run_that_broadcasts_its_pushes_serves_the_trainers_policy(
    broadcast_server, default_model_dir, tmp_path
) -> None:
    """``trainer.broadcast`` (gloo, the CPU twin of NCCL), each push sent while the next
    step trains: every canary passes and a fresh episode is the checkpoint's own."""
    broadcast = BroadcastConfig(backend="gloo", port=free_port(), timeout_s=120)
    config = _config(tmp_path / "run", steps=3).model_copy(
        update={"broadcast": broadcast, "background_push": True}
    )
    _three_steps_on_served_weights(broadcast_server, config, default_model_dir)
    # broadcast, not uploaded: an upload would have left its weights in the server's store
    assert not (broadcast_server.data_dir / "policy" / "state.json").exists()


def test_a_whole_model_goes_to_an_adapter_server_as_an_adapter_that_adds_nothing(
    adapter_server, default_model_dir
) -> None:
    """How ``rollgym run`` evaluates its warm start on a server that serves adapters only."""
    base = AutoModelForCausalLM.from_pretrained(default_model_dir, dtype="float32")
    with ServerClient(adapter_server.client_config()) as client:
        assert client.policy().lora_max_rank == 8
        sync = WeightPusher.push_policy(client, base)
        client.start_rollouts(_job())
        try:
            episode = _fresh_episode(client, sync.policy_version)
        finally:
            client.stop_rollouts()
    assert sync.bytes < 100_000  # one rank-1 pair per layer, not the model
    _assert_served_weights_are(default_model_dir, episode)


def test_a_server_that_cannot_start_is_reported_with_its_log(tmp_path) -> None:
    empty = tmp_path / "no-model"
    empty.mkdir()
    process = ServerProcess(model_dir=empty, data_dir=tmp_path / "server", startup_timeout_s=120)
    with pytest.raises(ServerUnavailable, match="exited with code") as error:
        process.start()
    assert "config.json" in str(error.value)  # the server's own message, from its log
