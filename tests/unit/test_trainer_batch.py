"""Batch building: exact tokens, masks on model tokens only, TRL's per-sample layout."""

from __future__ import annotations

import random

from trainer_fakes import ENV_TOKENS, PROMPT, make_trajectory, random_group

from rollgym.contract.wire import TrajectoryGroup
from rollgym.trainer.batch import build_batch
from rollgym.trainer.rewards import trajectory_return


def test_batch_keeps_the_sampled_tokens_and_logprobs_verbatim() -> None:
    groups = [random_group(3, 4, random.Random(s)) for s in range(2)]
    batch = build_batch(groups, 4)
    flat = [t for g in groups for t in g.trajectories]
    assert len(batch) == 8
    assert batch.prompt_ids == [t.prompt_ids for t in flat]
    assert batch.completion_ids == [t.completion_ids for t in flat]
    assert batch.logprobs == [t.logprobs for t in flat]
    # groups stay adjacent: TRL reshapes rewards to (-1, group_size)
    assert batch.group_id == [groups[0].group_id] * 4 + [groups[1].group_id] * 4


def test_env_mask_covers_model_tokens_only() -> None:
    trajectory = make_trajectory(group_id="g", version=0, first_turn=[5, 6, 7], second_turn=[8])
    batch = build_batch([TrajectoryGroup(group_id="g", env_id="e", trajectories=[trajectory])], 1)
    (ids,), (mask,) = batch.completion_ids, batch.env_mask
    model_tokens = [tok for tok, m in zip(ids, mask, strict=True) if m == 1]
    env_tokens = [tok for tok, m in zip(ids, mask, strict=True) if m == 0]
    assert model_tokens == [5, 6, 7, 8]
    assert env_tokens == ENV_TOKENS
    assert batch.prompt_ids == [PROMPT]  # the prompt is never in the loss (TRL's prompt side)


def test_rollout_output_is_what_trl_expects() -> None:
    output = build_batch([random_group(0, 2, random.Random(0))], 2).as_rollout_output()
    assert {"prompt_ids", "completion_ids", "logprobs", "env_mask"} <= output.keys()
    assert all(len(v) == 2 for v in output.values())


def test_invalid_episodes_get_no_reward_so_trl_excludes_them() -> None:
    rewards = trajectory_return(
        ["a", "b", "c"], trajectory_reward=[1.0, 0.0, 0.5], trajectory_valid=[True, False, True]
    )
    assert rewards == [1.0, None, 0.5]


def test_a_shortened_group_is_padded_with_samples_that_carry_no_weight() -> None:
    group = random_group(0, 3, random.Random(4))  # one of four episodes failed (infra)
    batch = build_batch([group], 4)
    assert len(batch) == 4 and batch.group_id == [group.group_id] * 4
    assert batch.trajectory_valid == [True, True, True, False]
    assert batch.env_mask[3] == [0] * len(batch.completion_ids[3])  # nothing enters the loss
    rewards = trajectory_return([None] * 4, batch.trajectory_reward, batch.trajectory_valid)
    assert rewards[3] is None  # TRL: out of the baseline, zero advantage
