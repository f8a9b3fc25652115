"""The README's main command, ``rollgym run``, on shrunken configs: the built-in run (SmolLM2
on the tool task) and the agent-tiny preset with the sandbox in the loop, and (on the guess
preset, whose warm start takes seconds) interrupt, then resume.

The same pipeline as the built-in default (warm start, real server, GRPO, held-out
evaluation, report), with few demonstrations and steps so it fits a test run.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from rollgym.trainer.checkpoint import STATE_FILE

STEPS = 4


def _small_config(run_dir: Path) -> dict[str, object]:
    return {
        "run_dir": str(run_dir),
        "warmstart": {
            "demos": {
                "kind": "guess",
                "oracle_episodes": 24,
                "imperfect_episodes": 8,
                "drill_episodes": 8,
            },
            "epochs": 1.0,
        },
        "trainer": {
            "output_dir": "grpo",
            "group_size": 4,
            "groups_per_batch": 2,
            "total_steps": STEPS,
            "max_staleness": 1,
            "online_eval": {"every": 2, "episodes": 8},
            "guard": None,  # 8 episodes swing by more than its margin (tests/unit has its rule)
        },
        "eval_episodes": 8,
    }


def _rollgym_run(config: Path, *flags: str) -> list[str]:
    return [sys.executable, "-m", "rollgym.cli", "run", *flags, "--config", str(config)]


def _wait_for(path: Path, process: subprocess.Popen[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if process.poll() is not None:
            raise AssertionError(f"rollgym run exited early:\n{process.communicate()[0][-3000:]}")
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"{path} did not appear")
        time.sleep(0.5)


def test_rollgym_run_can_be_interrupted_and_resumed(tmp_path) -> None:
    run_dir = tmp_path / "run"
    config = tmp_path / "run.json"
    config.write_text(json.dumps(_small_config(run_dir)))

    first = subprocess.Popen(
        _rollgym_run(config, "--preset", "guess"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    _wait_for(run_dir / "grpo" / "checkpoint-1" / STATE_FILE, first, timeout_s=900)
    first.send_signal(signal.SIGINT)  # Ctrl-C
    output, _ = first.communicate(timeout=300)
    assert first.returncode == 130, output[-3000:]
    assert "run the same command again to resume" in output
    assert not (run_dir / "summary.json").exists()

    second = subprocess.run(
        _rollgym_run(config, "--preset", "guess"),
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert second.returncode == 0, (second.stdout + second.stderr)[-3000:]
    assert "resuming from" in second.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == STEPS
    steps = [json.loads(line)["step"] for line in (run_dir / "grpo" / "steps.jsonl").open()]
    assert steps == list(range(1, STEPS + 1))  # no step lost or repeated across the restart
    for policy in ("warm_start", "rl"):
        assert summary["success_rate"][policy]["episodes"] == 8
    # the collapse alarms of every step, across both sessions, and their bounds
    per_step = summary["alarms"]["per_step"]
    assert [a["step"] for a in per_step] == list(range(1, STEPS + 1))
    for metric in ("kl_behaviour", "entropy", "grad_norm", "is_ratio_p99", "step_kl"):
        assert all(metric in a for a in per_step), metric
    # the built-in trust region watched every step; what it undid is counted
    assert summary["config"]["trainer"]["max_step_kl"] == 0.02
    assert summary["undone_steps"] == sum(a["step_rejected"] for a in per_step)
    assert summary["alarms"]["bounds"]["max_kl_behaviour"] == 0.1
    # online evaluation at steps 2 and 4 across both sessions, the best kept and evaluated
    # on the held-out seeds beside the last checkpoint
    assert [p["step"] for p in summary["online_eval"]] == [2, 4]
    assert all(p["episodes"] + p["infra_failures"] == 8 for p in summary["online_eval"])
    assert summary["success_rate"]["best"]["episodes"] == 8 and summary["rollbacks"] == 0
    assert (run_dir / "grpo" / "best" / "config.json").is_file()
    assert (run_dir / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the live table was printed for every step of the second session
    assert second.stdout.count("  sampling ") >= 1


def test_the_built_in_run_trains_smollm2_with_the_sandbox_in_the_loop(tmp_path, smollm2_dir):
    """The built-in run shrunk, on its own model: SmolLM2 warm-started on 32 conversations
    that all call the tool, 2 GRPO steps of 2 groups of 4 with an online evaluation after
    each, the held-out evaluation of warm start, last and best. Its calls run in boxes of the
    server's warm pool, and the run reports the sandbox's turns apart from the model's
    (about 2.5 minutes). The warm start's 4 steps teach the calls: 14 of 16 trained episodes
    ran code in a box in each of two runs; with 16 conversations (2 steps) 3 to 5 did, and
    once none did."""
    run_dir = tmp_path / "default"
    config = tmp_path / "default.json"
    warmstart = {
        "demos": {"kind": "compute", "episodes": 32, "direct_share": 0.0},
        "learning_rate": 1e-4,
    }
    small = _two_steps(run_dir, warmstart, online_eval={"every": 1, "episodes": 8})
    config.write_text(json.dumps(small))
    summary = _run_and_check_the_box_was_in_the_loop(run_dir, config)
    assert summary["config"]["model_dir"] == str(smollm2_dir)  # the preset's model
    assert [p["step"] for p in summary["online_eval"]] == [1, 2]
    assert summary["success_rate"]["best"]["episodes"] == 8


def test_the_agent_tiny_preset_trains_with_the_sandbox_in_the_loop(tmp_path, tool_model_dir):
    """The 3.3M model's tool run shrunk: its warm start's three phases (copies, drills,
    conversations) a step each at a low rate, from the test model that calls the tool
    (``tool_model_dir``: from random weights the phases take minutes); that model's rewards
    differ within a group only by its rejected messages (-0.05 each), enough for GRPO to
    take a step."""
    run_dir = tmp_path / "compute"
    config = tmp_path / "compute.json"
    demos = {
        "kind": "compute",
        "copies": 64,
        "drills": 32,
        "episodes": 32,
        "copy_learning_rate": 1e-5,
        "drill_learning_rate": 1e-5,
    }
    small = _two_steps(run_dir, {"demos": demos, "learning_rate": 1e-5}, online_eval=None)
    small["model_dir"] = str(tool_model_dir)
    config.write_text(json.dumps(small))
    _run_and_check_the_box_was_in_the_loop(run_dir, config, "--preset", "agent-tiny")
    warm = json.loads((run_dir / "warmstart" / "rollgym-warmstart.json").read_text())
    assert warm["config"]["demos"]["copies"] == 64  # the copies, the drills, the plays


def _two_steps(run_dir: Path, warmstart: dict, online_eval: dict | None) -> dict:
    """A run config of 2 GRPO steps of 2 groups of 4 on 4 boxes, 8 held-out episodes."""
    return {
        "run_dir": str(run_dir),
        "warmstart": warmstart,
        "task": {"sandboxes": 4},
        "trainer": {
            "output_dir": "grpo",
            "group_size": 4,
            "groups_per_batch": 2,
            "total_steps": 2,
            "online_eval": online_eval,
            "guard": None,
        },
        "eval_episodes": 8,
    }


def _run_and_check_the_box_was_in_the_loop(run_dir: Path, config: Path, *flags: str) -> dict:
    done = subprocess.run(
        _rollgym_run(config, *flags),
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "sandboxes) on loopback" in done.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["config"]["task"]["env_id"] == "rollgym/Compute-v0"
    # the box was in the loop: turns ran code in the sandboxes, timed apart from the model
    latency = summary["turn_latency_s"]
    assert {"model", "environment", "sandbox"} <= set(latency)
    assert 0 < latency["sandbox"]["p50"] <= latency["sandbox"]["p99"]
    assert latency["sandbox"]["p50"] <= latency["environment"]["p99"]
    assert summary["stage_shares"]["environment"][0] > 0  # busy seconds
    for policy in ("warm_start", "rl"):
        assert summary["success_rate"][policy]["episodes"] == 8
    return summary
