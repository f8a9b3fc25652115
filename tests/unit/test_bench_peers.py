"""bench.peers: both arms train the built-in run's settings, TRL lays out the tokens
rollgym's codec does (so one warm start serves both), and the time-to-quality verdict.
The docker tier runs the TRL arm's exec boxes on real containers
(tests/docker/test_bench_peers_docker.py)."""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from bench.grpo_mode import steps_per_min, tokens_per_s
from bench.memory import PeakRss
from bench.peers import (
    ArmRun,
    arm_from_json,
    arm_to_json,
    gain_level,
    run_config,
    run_lines,
    shares,
    verdict_lines,
)
from bench.peers_trl import tool_listing_template
from bench.trainer import CurvePoint
from rollgym.trainer.evaluate import SuccessRate, wilson_interval

N = 100  # held-out episodes a point


def rate(successes: int) -> SuccessRate:
    return SuccessRate(successes, N, *wilson_interval(successes, N), successes / N)


def arm(name: str, points: list[tuple[float, int]], seed: int = 0) -> ArmRun:
    """An arm whose curve is ``(seconds, successes of 100)`` at steps 0, 1, 2, ..."""
    curve = [CurvePoint(step, at, rate(k)) for step, (at, k) in enumerate(points)]
    return ArmRun(
        name,
        seed,
        step_s=[at for at, _ in points[1:]],
        wall_s=points[-1][0],
        env_share=0.1,
        peak_mib=1.0,
        curve=curve,
    )


def test_the_arms_train_the_built_in_runs_settings(tmp_path: Path) -> None:
    from rollgym.run.flags import preset_base
    from rollgym.run.pipeline import RunConfig
    from rollgym.trainer.config import parse_config

    args = argparse.Namespace(steps=6, eval_every=2, lr=1e-5, max_step_kl=0.0)
    built_in = parse_config(RunConfig, **preset_base("default"))
    config = run_config(args, 3, tmp_path)
    same = ("group_size", "groups_per_batch", "temperature", "max_staleness", "beta", "loss_type")
    assert {k: getattr(config.trainer, k) for k in same} == {
        k: getattr(built_in.trainer, k) for k in same
    }
    assert (config.trainer.learning_rate, config.trainer.max_step_kl) == (1e-5, None)
    args.max_step_kl = 0.02  # the built-in run's trust region, when asked for
    assert run_config(args, 3, tmp_path).trainer.max_step_kl == built_in.trainer.max_step_kl
    assert config.task == built_in.task and config.model_dir == built_in.model_dir
    assert (config.trainer.total_steps, config.trainer.checkpoint_every) == (6, 2)
    assert config.trainer.online_eval is None and config.warmstart is None
    assert config.rollout_job().seeds[:2] == [300_000, 300_001]  # the seed's own tasks
    assert run_config(args, 3, tmp_path, staleness=0).trainer.max_staleness == 0


def test_trl_lays_out_the_tokens_rollgyms_codec_does(smollm2_dir: Path, tmp_path: Path) -> None:
    """SmolLM2's template ignores tools; with ``tool_listing_template`` TRL shows the built-in
    task's prompt and tool replies token for token as rollgym's codec, and reads a sampled
    call as a call of ``python(code)``."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOTrainer
    from trl.chat_template_utils import parse_response

    from rollgym.doors.trl import (
        TrlEnvironments,
        closing_reward,
        quiet_experimental,
        response_template,
    )
    from rollgym.envs.compute import PYTHON_TOOL
    from rollgym.envs.scripted import tool_call
    from rollgym.sandboxes.config import PoolConfig
    from rollgym.sandboxes.fake import FakeSandboxPool
    from rollgym.server.conversation.codec import ChatCodec
    from rollgym.trainer.config import TrainerConfig
    from rollgym.trainer.grpo import grpo_args

    codec = ChatCodec.from_model_dir(smollm2_dir)
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    tokenizer.chat_template = tool_listing_template(tokenizer, [PYTHON_TOOL.to_openai()])
    tokenizer.response_template = response_template()
    config = TrainerConfig(output_dir=tmp_path, total_steps=1)
    pool = FakeSandboxPool(PoolConfig(size=1, health_interval_s=0))
    with pool, TrlEnvironments("rollgym/Compute-v0", sandbox_pool=pool) as environments:
        rows = environments.rows([0])
        with quiet_experimental():
            grpo = GRPOTrainer(
                model=str(smollm2_dir),
                args=grpo_args(config, max_completion_length=64, save_strategy="no"),
                train_dataset=Dataset.from_list(rows),
                processing_class=tokenizer,
                environment_factory=environments,
                reward_funcs=[closing_reward],
            )
    grpo._batch_environments = [None]
    prompt_ids, _, _ = grpo._tokenize_prompts([rows[0]["prompt"]])
    first = codec.first_prompt(rows[0]["prompt"], tools=[PYTHON_TOOL.to_openai()])
    assert list(prompt_ids[0]) == first
    assert "<tools>" in codec.decode(first)  # the listing is there, not dropped by both
    reply = {"role": "tool", "content": "13121070"}
    assert grpo._get_tool_suffix_ids([{**reply, "name": "python"}]) == codec.continuation(
        [reply], stopped=True
    )
    sampled = [*codec.encode(tool_call("python", {"code": "print(7890 * 1663)"})), codec.eos_id]
    parsed = parse_response(tokenizer, sampled, prefix=first, tools=grpo._env_tools[None])
    assert parsed["tool_calls"][0]["function"] == {
        "name": "python",
        "arguments": {"code": "print(7890 * 1663)"},
    }


def test_a_template_that_renders_tools_is_left_as_it_is(default_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    assert tool_listing_template(tokenizer, []) == tokenizer.chat_template


def test_each_arm_is_timed_to_trls_final_success_and_to_90_percent_of_its_gain() -> None:
    """TRL ends at (60 + 70 + 80) / 3 = 70%, reached at its last point (400 s); 90% of its
    gain is 30 + 0.9 x 40 = 66%, also first held by three points at 400 s. rollgym's three
    points in a row reach 70% at 90 s; the slow arm holds 66% from 800 s, never 70%."""
    trl = arm("trl", [(0, 30), (100, 40), (200, 60), (300, 70), (400, 80)])
    ours = arm("rollgym", [(0, 30), (30, 60), (60, 70), (90, 80), (120, 85)])
    slow = arm("rollgym-sync", [(0, 30), (200, 60), (400, 66), (600, 66), (800, 67)])
    runs = [trl, ours, slow]
    assert gain_level(runs) == pytest.approx(0.66)
    assert shares(runs) == {"trl": 1.0, "rollgym": pytest.approx(0.225), "rollgym-sync": None}
    assert shares(runs, gain_level(runs)) == {
        "trl": 1.0,
        "rollgym": pytest.approx(0.225),
        "rollgym-sync": 2.0,
    }
    lines = run_lines(rate(30), runs)
    assert lines[0].endswith("levels: trl's final 70.0%, 90% of its gain 66.0%")
    assert "90 s (0.23)   90 s (0.23)" in lines[3]
    assert "never  800 s (2.00)" in lines[4]


def test_the_verdict_needs_every_run() -> None:
    def run(seed: int, ours: list[tuple[float, int]]) -> list[ArmRun]:
        trl = arm("trl", [(0, 30), (100, 40), (200, 60), (300, 70), (400, 80)], seed)
        return [trl, arm("rollgym", ours, seed)]

    fast = [(0, 30), (30, 60), (60, 70), (90, 80), (120, 85)]
    assert [line.split()[0] for line in verdict_lines([run(0, fast), run(1, fast)])[1:]] == [
        "met",
        "met",
        "met",
    ]
    late = [(0, 30), (100, 60), (200, 70), (300, 80), (400, 85)]  # 0.75 of TRL's time
    lines = verdict_lines([run(0, fast), run(1, late)])
    assert lines[0].endswith("share of TRL's: 0.23, 0.75; to 90% of TRL's gain: 0.23, 0.75)")
    assert lines[2].startswith("  NOT MET <= 0.25") and lines[2].endswith("1 of 2")
    flat = [(0, 30), (30, 31), (60, 29), (90, 30), (120, 30)]  # learns nothing, never there
    lines = verdict_lines([run(0, fast), run(1, flat)])
    assert [line.split()[0] for line in lines[1:]] == ["NOT", "NOT", "NOT"]
    assert verdict_lines([[arm("rollgym", fast)]])[0].startswith("no verdict")


def test_a_failed_arm_is_shown_with_its_reason() -> None:
    trl = arm("trl", [(0, 30), (100, 40), (200, 60), (300, 70)])
    failed = ArmRun("rollgym", 0, error="exit code 1: MemoryError")
    assert run_lines(rate(30), [trl, failed])[3] == "rollgym      failed: exit code 1: MemoryError"
    assert verdict_lines([[trl, failed]])[0].startswith("no verdict")


def test_an_arm_survives_results_json() -> None:
    run = arm("trl", [(0, 30), (100, 40), (200, 60)], seed=2)
    run = ArmRun(**{**run.__dict__, "checkpoints": {1: "/a/checkpoint-1"}, "peak_mib": 900.0})
    assert arm_from_json(json.loads(json.dumps(arm_to_json(run)))) == run


def test_rates_run_from_the_first_steps_end_to_the_last() -> None:
    ends = [100.0, 110.0, 120.0, 130.0]
    logs = [{"completions/mean_length": 50.0, "loss": 0.1}] * 4 + [{"train_runtime": 30.0}]
    assert steps_per_min(ends) == 6.0
    assert tokens_per_s(ends, logs, batch=32) == pytest.approx(3 * 50 * 32 / 30)
    assert math.isnan(steps_per_min(ends[:1]))
    assert arm("trl", [(0, 30), (10, 40), (20, 50), (40, 60)]).updates_per_min == 4.0


def test_peak_memory_counts_this_process() -> None:
    with PeakRss(interval_s=0.01) as peak:
        pass
    assert peak.mib > 10


def test_peak_memory_counts_a_child_started_inside_the_block() -> None:
    """The descendants are found anew every ``tree_every_s``: a child that holds 200 MiB
    for a second is in the peak."""
    hold = "b = bytearray(200 * 2**20); import time; time.sleep(1.0)"
    with PeakRss(interval_s=0.01) as alone:
        pass
    with PeakRss(interval_s=0.01, tree_every_s=0.05) as peak:
        subprocess.run([sys.executable, "-c", hold], check=True)
    assert peak.mib > alone.mib + 190
