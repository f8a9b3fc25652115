"""The GRPO loop end to end against the fake server: TRL and the tiny default model, no engine.

The real twin runs the same loop against the real server and vLLM engine:
tests/e2e/test_trainer_e2e.py.
"""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path

import pytest
import torch
from trainer_fakes import (
    ENV_TOKENS,
    GOOD_TOKEN,
    FakeServer,
    fast_config,
    make_trajectory,
    random_group,
    scored_batches,
)
from transformers import AutoModelForCausalLM

from rollgym.contract.wire import TrajectoryGroup
from rollgym.trainer import grpo, shared_prompt
from rollgym.trainer.checkpoint import latest_checkpoint, read_state
from rollgym.trainer.config import TrainerConfig
from rollgym.trainer.errors import ServerReplyError
from rollgym.trainer.loop import train
from rollgym.trainer.lora import (
    LoraSettings,
    as_tensor,
    is_adapter_dir,
    load_policy,
    served_weights,
)


def _config(tmp_path: Path, **values) -> TrainerConfig:
    defaults = dict(total_steps=3, checkpoint_every=1, keep_checkpoints=10, learning_rate=1e-3)
    return fast_config(tmp_path / "run", **{**defaults, **values})


def _checkpoint_weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    model = AutoModelForCausalLM.from_pretrained(checkpoint)
    return {name: p.detach() for name, p in model.named_parameters()}


def test_every_step_pushes_new_weights_and_the_version_rises(tmp_path, default_model_dir) -> None:
    fake = FakeServer(version=7)
    config = _config(tmp_path, max_staleness=0)
    result = train(config, fake.client(), default_model_dir, printer=None)

    assert result.steps == 3
    # one push of the starting weights, then one per step; each bumps the version by one
    assert len(fake.weights) == 4 and fake.version == 11 == result.policy_version
    # synchronous mode: each pull asks for the version just pushed, staleness 0
    assert [r.trainer_version for r in fake.pull_requests] == [8, 9, 10]
    assert {r.max_staleness for r in fake.pull_requests} == {0}
    first, last = fake.weights[0], fake.weights[-1]
    assert first.keys() == last.keys()
    assert any(not torch.equal(first[k], last[k]) for k in first)  # training changed them
    # the server holds exactly the weights of the final checkpoint
    final = _checkpoint_weights(latest_checkpoint(config.output_dir))
    for name, tensor in final.items():
        torch.testing.assert_close(fake.weights[-1][name], tensor)
    # every trained group was acked after its checkpoint; nothing left leased
    assert fake.acked == set(fake.handed_out) and not fake.leased
    assert [r.step for r in result.records] == [1, 2, 3]
    assert [r.policy_version for r in result.records] == [9, 10, 11]
    assert result.records[-1].reward_mean == pytest.approx(0.5)  # the fake's reward mix
    # each step went to the dashboard with the training spans since the previous report
    assert [r.step for r in fake.reports] == [1, 2, 3]
    assert [r.policy_version for r in fake.reports] == [9, 10, 11]
    assert all(r.busy_spans for r in fake.reports)
    starts = [start for r in fake.reports for start, _ in r.busy_spans]
    assert starts == sorted(starts)  # no span sent twice


def test_a_server_without_dashboard_does_not_stop_training(tmp_path, default_model_dir) -> None:
    fake = FakeServer(dashboard=False)
    lines: list[str] = []
    result = train(
        _config(tmp_path, total_steps=2), fake.client(), default_model_dir, printer=lines.append
    )
    assert result.steps == 2
    assert sum("no dashboard" in line for line in lines) == 1


def test_stale_groups_in_the_buffer_are_dropped_and_counted(tmp_path, default_model_dir) -> None:
    fake = FakeServer(version=4)
    rng = random.Random(3)
    fake.add(random_group(1, 4, rng), random_group(2, 4, rng))  # from long-gone policies
    config = _config(tmp_path, max_staleness=1, total_steps=1)
    result = train(config, fake.client(), default_model_dir, printer=None)
    assert result.dropped.stale_server == 8
    assert result.records[-1].dropped_total == 8
    assert result.records[-1].version_lag_max <= 1


def test_each_step_shows_the_groups_the_server_filtered(tmp_path, default_model_dir) -> None:
    fake = FakeServer()
    fake.dropped_zero_variance = 5  # all-equal groups that never reached a pull
    lines: list[str] = []
    config = _config(tmp_path, total_steps=1)
    result = train(config, fake.client(), default_model_dir, printer=lines.append)
    assert result.records[-1].filtered_groups == 5
    assert any("dropped 0  filtered 5  invalid 0" in line for line in lines)


def _same_batch_producer():
    """Every pull gets the same two groups' tokens and rewards (fresh ids, current version)."""
    firsts = [[GOOD_TOKEN, 40], [GOOD_TOKEN, 41], [50, 40], [51, 41]]

    def produce(version: int, size: int) -> TrajectoryGroup:
        group_id = uuid.uuid4().hex
        trajectories = [
            make_trajectory(group_id=group_id, version=version, first_turn=f) for f in firsts
        ]
        return TrajectoryGroup(group_id=group_id, env_id="fake", trajectories=trajectories)

    return produce


def _good_minus_bad_logprob(model_dir: Path) -> float:
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    ids = torch.tensor([[1, 33, 44, 55, 66, GOOD_TOKEN], [1, 33, 44, 55, 66, 50]])
    with torch.no_grad():
        logps = model(ids[:, :-1]).logits[:, -1].log_softmax(-1)
    return float(logps[0, GOOD_TOKEN] - logps[1, 50])


def test_loss_falls_on_a_fixed_batch(tmp_path, default_model_dir) -> None:
    fake = FakeServer(producer=_same_batch_producer())
    config = _config(tmp_path, total_steps=6, learning_rate=3e-3, checkpoint_every=6)
    result = train(config, fake.client(), default_model_dir, printer=None)
    losses = [r["loss"] for r in result.trl_logs if "loss" in r]
    assert len(losses) == 6
    assert losses[-1] < losses[0]
    # ...because the policy moved toward the rewarded first token and away from the other
    trained = latest_checkpoint(config.output_dir)
    assert _good_minus_bad_logprob(trained) > _good_minus_bad_logprob(default_model_dir) + 0.5


def test_bf16_mixed_precision_trains_under_autocast_and_pushes_float32_weights(
    tmp_path, default_model_dir, monkeypatch
) -> None:
    autocast: list[tuple[bool, torch.dtype]] = []
    forward = grpo.shared_prompt_forward

    def recorded(model, input_ids, *args, **kwargs):  # type: ignore[no-untyped-def]
        kind = input_ids.device.type
        autocast.append((torch.is_autocast_enabled(kind), torch.get_autocast_dtype(kind)))
        return forward(model, input_ids, *args, **kwargs)

    monkeypatch.setattr(grpo, "shared_prompt_forward", recorded)
    monkeypatch.setattr(shared_prompt, "GPU_MIN_SKIPPED_TOKENS", 1)  # shared on a GPU too
    fake = FakeServer()
    config = _config(tmp_path, total_steps=2, mixed_precision="bf16", gradient_checkpointing=False)
    result = train(config, fake.client(), default_model_dir, printer=None)

    assert result.steps == 2
    assert autocast == [(True, torch.bfloat16)] * 2  # each step's loss forward
    first, last = fake.weights[0], fake.weights[-1]
    assert {tensor.dtype for tensor in last.values()} == {torch.float32}
    assert any(not torch.equal(first[k], last[k]) for k in first)


def test_trl_trains_on_model_tokens_with_the_behaviour_logprob_correction(
    tmp_path, default_model_dir, monkeypatch
) -> None:
    """What TRL builds from our batch: env tokens out of the loss, IS ratio in."""
    fake = FakeServer()
    config = _config(tmp_path, total_steps=1)
    outputs = scored_batches(monkeypatch)
    train(config, fake.client(), default_model_dir, printer=None)
    [captured] = outputs

    loss_mask = captured["completion_mask"] * captured["tool_mask"]
    first_turn = 2  # the fake's episodes: 2 model tokens, 3 env tokens, 2 model tokens
    env = slice(first_turn, first_turn + len(ENV_TOKENS))
    assert loss_mask[:, env].sum() == 0
    assert loss_mask[:, :first_turn].all() and loss_mask[:, env.stop : env.stop + 2].all()
    ratio = captured["importance_sampling_ratio"]
    assert ratio.shape == loss_mask.shape and not torch.allclose(ratio, torch.ones_like(ratio))
    assert float(ratio.max()) <= config.importance_sampling_cap
    # group-relative advantages: the fake's rewards are 1,1,0,0 per group -> +a,+a,-a,-a
    advantages = captured["advantages"].view(-1, 4)
    assert torch.all(advantages[:, :2] > 0) and torch.all(advantages[:, 2:] < 0)
    torch.testing.assert_close(advantages.sum(dim=1).cpu(), torch.zeros(2), atol=1e-4, rtol=0)


def test_frozen_embeddings_stay_put_and_the_step_logs_alarms_and_samples(
    tmp_path, default_model_dir
) -> None:
    fake = FakeServer()
    config = _config(tmp_path, total_steps=2, train_embeddings=False, log_samples=True)
    result = train(config, fake.client(), default_model_dir, printer=None)

    before = _checkpoint_weights(default_model_dir)
    after = _checkpoint_weights(latest_checkpoint(config.output_dir))
    embedding = "model.embed_tokens.weight"
    torch.testing.assert_close(after[embedding], before[embedding], atol=0, rtol=0)
    assert any(not torch.equal(after[k], before[k]) for k in before if k != embedding)
    steps = [log for log in result.trl_logs if "loss" in log]
    assert all("alarms/kl_behaviour" in log and "alarms/is_ratio_p99" in log for log in steps)
    lines = (config.output_dir / "samples.jsonl").read_text().splitlines()
    assert len(lines) == 2
    sample = json.loads(lines[0])["samples"][0]
    assert len(sample["ids"]) == len(sample["lp_behaviour"]) == len(sample["lp_trainer"]) > 0


def _trained_ids(output_dir: Path) -> list[str]:
    """Every group id trained, from the checkpoints' ledgers (one checkpoint per step)."""
    ids = []
    for folder in sorted(output_dir.glob("checkpoint-*")):
        ids.extend(read_state(folder).unacked_group_ids)
    return ids


def test_resume_restores_weights_and_version_and_trains_no_group_twice(
    tmp_path, default_model_dir
) -> None:
    fake = FakeServer(version=0)

    def config(steps: int) -> TrainerConfig:  # a wide window: re-sent groups stay fresh
        return _config(tmp_path, total_steps=steps, max_staleness=3)

    first = train(config(2), fake.client(), default_model_dir, printer=None)
    assert first.steps == 2 and first.policy_version == 3

    # Step 3 is checkpointed, then the process dies before the server sees the ack...
    fake.acks_before_failure = 1  # the resumed ledger's ack at start goes through
    with pytest.raises(ServerReplyError, match="ack lost"):
        train(config(3), fake.client(), default_model_dir, printer=None)
    fake.acks_before_failure = None
    checkpoint3 = latest_checkpoint(tmp_path / "run")
    step3_groups = read_state(checkpoint3).unacked_group_ids
    assert read_state(checkpoint3).step == 3 and not set(step3_groups) & fake.acked
    # ...so its groups stay leased, and the server re-delivers them after the lease timeout.
    fake.redeliver_leases()

    version_before, pushes_before = fake.version, len(fake.weights)
    second = train(config(5), fake.client(), default_model_dir, printer=None)
    assert second.resumed_from == checkpoint3
    # the server still serves step 3's push, the checkpoint's weights, at the checkpoint's
    # version: the resumed run pushes nothing at start, only after steps 4 and 5
    restored = _checkpoint_weights(checkpoint3)
    for name, tensor in restored.items():
        torch.testing.assert_close(fake.weights[pushes_before - 1][name], tensor)
    assert len(fake.weights) == pushes_before + 2
    assert second.policy_version == version_before + 2 == fake.version
    assert [r.step for r in second.records] == [1, 2, 3, 4, 5]
    # the re-delivered step-3 groups were acked and skipped, not trained again
    assert set(step3_groups) <= fake.acked
    assert second.dropped.already_trained == len(step3_groups) * 4
    trained = _trained_ids(tmp_path / "run")
    assert len(trained) == len(set(trained)) == 5 * 2


def _evaluator(rates: list[float]):  # type: ignore[no-untyped-def]
    """Answers evaluation ``i`` with a success rate of ``rates[i]`` over its seeds."""
    calls = iter(rates)

    def answer(request):  # type: ignore[no-untyped-def]
        rate, n = next(calls), len(request.seeds)
        wins = round(rate * n)
        groups = []
        for i, seed in enumerate(request.seeds):
            group_id = uuid.uuid4().hex
            episode = make_trajectory(
                group_id=group_id, version=0, first_turn=[5], reward=1.0 if i < wins else 0.0
            )
            groups.append(
                TrajectoryGroup(
                    group_id=group_id, env_id="e", task_seed=seed, trajectories=[episode]
                )
            )
        return groups

    return answer


@pytest.mark.parametrize("lora", [None, LoraSettings(rank=4)], ids=["full", "lora"])
def test_online_evaluation_keeps_the_best_and_the_guard_rolls_back(
    tmp_path, default_model_dir, lora
) -> None:
    from rollgym.contract.wire import SamplingSettings
    from rollgym.trainer.config import GuardConfig, OnlineEvalConfig
    from rollgym.trainer.online_eval import BEST_DIR, EvalTask, read_points

    fake = FakeServer(version=0)
    fake.evaluator = _evaluator([0.5, 0.75, 0.25, 0.75, 0.75])  # a fall of 50 points at step 3
    config = _config(
        tmp_path,
        total_steps=5,
        online_eval=OnlineEvalConfig(every=1, episodes=8, first_seed=500),
        guard=GuardConfig(margin=0.15, lr_factor=0.5),
        lora=lora,
    )
    task = EvalTask(env_id="e", env_kwargs={}, max_turns=2, sampling=SamplingSettings())
    lines: list[str] = []
    result = train(
        config, fake.client(), default_model_dir, eval_tasks=[task], printer=lines.append
    )

    assert [r.seeds for r in fake.evaluations] == [list(range(500, 508))] * 5
    assert [(p.step, p.rate, p.rolled_back) for p in result.online_eval] == [
        (1, 0.5, False),
        (2, 0.75, False),
        (3, 0.25, True),
        (4, 0.75, False),  # as good as the best: not a new best, not a fall
        (5, 0.75, False),
    ]
    assert read_points(config.output_dir) == result.online_eval
    assert result.best_dir == config.output_dir / BEST_DIR
    # the rollback pushed step 2's weights (kept as the best) after step 3's own push
    best = served_weights(load_policy(result.best_dir))  # a LoRA run's best is its adapter
    assert is_adapter_dir(result.best_dir) == (lora is not None)
    for name, weight in best.items():
        torch.testing.assert_close(fake.weights[4][name], as_tensor(weight).detach())
    assert len(fake.weights) == 1 + 5 + 1 and result.policy_version == fake.version == 7
    [guard] = [line for line in lines if line.startswith("GUARD")]
    assert "step 3" in guard and "back to step 2" in guard and "0.001 -> 0.0005" in guard
    learning_rates = [log["learning_rate"] for log in result.trl_logs if "learning_rate" in log]
    # TRL logs the rate a step began with: halved from step 4 on (logged from step 5)
    assert learning_rates == pytest.approx([1e-3] * 4 + [5e-4])


def test_a_mixtures_online_evaluation_plays_each_env_and_pools_them(
    tmp_path, default_model_dir
) -> None:
    """Each env of the run is played on the same seeds; the point's rate (the one the best
    and the guard go by) is the pooled one, each env's is kept, printed and logged."""
    from rollgym.contract.wire import SamplingSettings
    from rollgym.trainer.config import OnlineEvalConfig
    from rollgym.trainer.online_eval import EnvScore, EvalTask

    fake = FakeServer(version=0)
    fake.evaluator = _evaluator([0.75, 0.25])  # easy, then hard
    config = _config(
        tmp_path, total_steps=1, online_eval=OnlineEvalConfig(every=1, episodes=8, first_seed=9)
    )
    tasks = [
        EvalTask(env_id=env, env_kwargs={}, max_turns=2, sampling=SamplingSettings())
        for env in ("easy", "hard")
    ]
    lines: list[str] = []
    result = train(config, fake.client(), default_model_dir, eval_tasks=tasks, printer=lines.append)

    assert [(r.env_id, r.seeds) for r in fake.evaluations] == [
        ("easy", list(range(9, 17))),
        ("hard", list(range(9, 17))),
    ]
    (point,) = result.online_eval
    assert (point.successes, point.episodes) == (8, 16)
    assert point.per_env == {
        "easy": EnvScore(successes=6, episodes=8),
        "hard": EnvScore(successes=2, episodes=8),
    }
    assert any("easy: 75.0%" in line and "hard: 25.0%" in line for line in lines)
    [logged] = [log for log in result.trl_logs if "rollgym/online_eval/success_rate" in log]
    assert logged["rollgym/online_eval/success_rate"] == 0.5
    assert logged["rollgym/online_eval/hard/success_rate"] == 0.25


def test_online_eval_needs_the_task(tmp_path, default_model_dir) -> None:
    from rollgym.trainer.config import OnlineEvalConfig
    from rollgym.trainer.errors import TrainerConfigError

    config = _config(tmp_path, online_eval=OnlineEvalConfig(every=1))
    with pytest.raises(TrainerConfigError, match="eval_tasks"):
        train(config, FakeServer().client(), default_model_dir, printer=None)
