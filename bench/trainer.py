"""Asynchronous vs synchronous GRPO on an environment-bound workload (one run, ratios).

    .venv/bin/python -m bench.trainer [--steps 30] [--env-latency 1.0] [--eval-episodes 200]
                                      [--latency constant|lognormal] [--stalenesses 1,2]
                                      [--max-step-kl 0.02]

The workload is GuessNumber whose every step also waits, the way a sandboxed environment
waits on its container (registered below as ``bench.trainer:SlowGuessNumber-v0``, which
the server imports by Gymnasium's ``module:id`` syntax): ``--env-latency`` seconds each
(``constant``), or a draw from a lognormal of that mean whose p99 is 10x its median
(``lognormal``: sigma = ln 10 / 2.326 = 0.99, median 0.61 x the mean, p99 6.1 x the mean;
agent environments have such long tails: a test suite that hangs, a slow install). One
warm start (the built-in SFT) feeds one GRPO run per mode, of the same number of steps,
each against a fresh server:

* ``sync``     ``max_staleness=0``: the trainer takes only samples of the weights it just
               pushed, so sampling and training take turns, and each step waits for its
               slowest episode;
* ``async-k``  ``max_staleness=k`` for each k of ``--stalenesses``: the server samples
               ahead while the trainer trains, within the window, and the groups that finish
               first are trained first, so the tail is hidden behind later groups.

Every mode trains with the built-in run's trust region (``--max-step-kl`` 0.02,
``trainer.trust_region``; 0 turns it off): without it, the staleness-4 run of 2026-12-04's
second run collapsed at its 21st step (the trainer's policy moved from the samples' by a KL
of 0.76-1.46 for three steps, then answered nothing), and its updates per minute measured
the collapse, not the mode (docs/benchmarks.md).

The table gives policy updates per minute and the ratio to ``sync`` (targets: >= 1.8x with
a constant latency; >= 2.8x at the best staleness with the long tail), the held-out success
rate of each final policy (target: inside the synchronous run's 95% interval), and the four
stages' busy and waiting shares of each run's wall time. The machine's load average is
printed with it: the numbers are only comparable within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any, Literal

import gymnasium

from bench import quiet_training_output
from rollgym.envs.guess_number import GuessNumberEnv

ENV_ID = "SlowGuessNumber-v0"
SERVED_ID = f"bench.trainer:{ENV_ID}"
MAX_TURNS = 3
LatencyDist = Literal["constant", "lognormal"]
LOGNORMAL_SIGMA = math.log(10) / 2.326  # z(0.99) = 2.326: the p99 is 10x the median


class SlowGuessNumberEnv(GuessNumberEnv):
    """GuessNumber whose every step waits (awaited: the server's loop runs on).

    ``latency="constant"``: ``latency_s`` each step; ``"lognormal"``: a draw of mean
    ``latency_s`` and p99 10x the median, from the env's own seeded generator.
    """

    def __init__(
        self, *, latency_s: float = 1.0, latency: LatencyDist = "constant", **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        if latency not in ("constant", "lognormal"):
            raise ValueError(f"latency must be 'constant' or 'lognormal', got {latency!r}")
        self.latency_s, self.latency = latency_s, latency

    def wait_s(self) -> float:
        if self.latency == "constant":
            return self.latency_s
        median = self.latency_s / math.exp(LOGNORMAL_SIGMA**2 / 2)
        return float(median * math.exp(LOGNORMAL_SIGMA * self.np_random.standard_normal()))

    def _turn(self, action: str) -> Any:
        time.sleep(self.wait_s())
        return super()._turn(action)

    async def _aturn(self, action: str) -> Any:
        await asyncio.sleep(self.wait_s())
        return super()._turn(action)


if ENV_ID not in gymnasium.registry:
    gymnasium.register(
        id=ENV_ID, entry_point="bench.trainer:SlowGuessNumberEnv", max_episode_steps=MAX_TURNS
    )


def _run_mode(name: str, staleness: int, args: argparse.Namespace, warm_dir: Path) -> dict:
    from bench.grpo_mode import served, train_timed
    from rollgym.run.demos import GUESS_RULES
    from rollgym.run.pipeline import RunConfig, final_weights
    from rollgym.run.task import TaskConfig
    from rollgym.trainer.config import TrainerConfig
    from rollgym.trainer.evaluate import evaluate_weights, held_out_seeds

    root = args.out / name
    shutil.rmtree(root, ignore_errors=True)
    task = TaskConfig(
        env_id=SERVED_ID,
        env_kwargs={
            "low": 1,
            "high": 8,
            **GUESS_RULES,
            "latency_s": args.env_latency,
            "latency": args.latency,
        },
        max_turns=MAX_TURNS,
    )
    trainer_config = TrainerConfig(
        output_dir=root / "grpo",
        group_size=8,
        groups_per_batch=4,
        max_staleness=staleness,
        total_steps=args.steps,
        learning_rate=args.lr,
        max_step_kl=args.max_step_kl or None,
    )
    run = RunConfig(
        run_dir=root, task=task, trainer=trainer_config, warmstart=None, eval_episodes=0
    )
    with served(warm_dir, root / "server") as client:
        timed = train_timed(run, client, warm_dir)
        success = evaluate_weights(
            client,
            final_weights(run),
            env_id="rollgym/GuessNumber-v0",  # the same task without the wait
            env_kwargs={"low": 1, "high": 8, **GUESS_RULES},
            seeds=held_out_seeds(args.eval_episodes),
            max_turns=MAX_TURNS,
            sampling=run.sampling(),
        )
    result = timed.result
    return {
        "mode": name,
        "staleness": staleness,
        "steps": result.steps,
        "wall_s": timed.wall_s,
        "updates_per_min": timed.updates_per_min,
        "success": success,
        "shares": result.stage_shares,
        "dropped": result.dropped.total,
        "lag": sum(r.version_lag_mean for r in result.records) / len(result.records),
        "load": timed.load,
    }


def _print_table(rows: list[dict], args: argparse.Namespace) -> None:
    from rollgym.trainer.stages import STAGES

    base = rows[0]["updates_per_min"]
    wait = f"{args.env_latency:.2f}s per env step"
    if args.latency == "lognormal":
        wait = f"lognormal env steps (mean {args.env_latency:.2f}s, p99 10x the median)"
    trust = f", trust region {args.max_step_kl:g}" if args.max_step_kl else ", no trust region"
    print(
        f"\nGRPO on GuessNumber with {wait}, {args.steps} steps per mode, batch 4 groups x 8{trust}"
    )
    print(
        f"{'mode':<9}{'updates/min':>12}{'vs sync':>9}{'wall s':>8}{'lag':>6}{'dropped':>9}"
        f"  held-out success (95% CI)"
    )
    for row in rows:
        print(
            f"{row['mode']:<9}{row['updates_per_min']:>12.2f}{row['updates_per_min'] / base:>8.2f}x"
            f"{row['wall_s']:>8.0f}{row['lag']:>6.2f}{row['dropped']:>9}  {row['success']}"
        )
    print("\nbusy share of each stage (rest: waiting), per mode")
    print(f"{'mode':<9}" + "".join(f"{stage:>13}" for stage in STAGES))
    for row in rows:
        cells = []
        for stage in STAGES:
            busy, waiting = row["shares"][stage]
            cells.append(f"{100 * busy / max(busy + waiting, 1e-9):>12.0f}%")
        print(f"{row['mode']:<9}" + "".join(cells))
    _print_verdict(rows, args)
    loads = ", ".join(f"{r['mode']} {r['load'][0]:.1f}->{r['load'][1]:.1f}" for r in rows)
    print(f"\nload average (1 min) before->after each run: {loads} on {os.cpu_count()} cores")


def _print_verdict(rows: list[dict], args: argparse.Namespace) -> None:
    sync, *asyncs = rows
    best = max(asyncs, key=lambda r: r["updates_per_min"])
    speedup = best["updates_per_min"] / sync["updates_per_min"]
    target = 2.8 if args.latency == "lognormal" else 1.8
    held = all(r["success"].rate >= sync["success"].low for r in asyncs)
    print(f"\nbest asynchronous mode: {best['mode']}, {speedup:.2f}x sync")
    print(
        f"  {'met' if speedup >= target else 'NOT MET':<8}>= {target}x sync at the best staleness"
    )
    print(f"  {'met' if held else 'NOT MET':<8}every async success inside sync's 95% CI or above")


def main() -> None:
    quiet_training_output()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--env-latency", type=float, default=1.0, help="mean seconds per step")
    parser.add_argument("--latency", choices=["constant", "lognormal"], default="constant")
    parser.add_argument("--stalenesses", default="1,2", help="the async modes' max_staleness")
    parser.add_argument("--eval-episodes", type=int, default=200)
    # Half the built-in run's 2e-4: over 30 steps 2e-4 sometimes collapses a run (success
    # near 0.1 for several steps), in any mode, and the final policy then measures the
    # collapse, not the mode. See docs/training.md, "Measured".
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument(
        "--max-step-kl", type=float, default=0.02, help="the trust region (built-in run's); 0: off"
    )
    parser.add_argument("--out", type=Path, default=Path(".data/bench-trainer"))
    args = parser.parse_args()
    args.out = args.out.resolve()

    from rollgym.contract import paths
    from rollgym.run.warmstart import WarmStartConfig, warm_start

    warm_dir = warm_start(
        WarmStartConfig(), paths.default_model_dir(), args.out / "warmstart", printer=print
    )
    modes = [("sync", 0)] + [(f"async-{k}", int(k)) for k in args.stalenesses.split(",")]
    rows = [_run_mode(name, staleness, args, warm_dir) for name, staleness in modes]
    _print_table(rows, args)
    summary = [{**r, "success": str(r["success"])} for r in rows]
    (args.out / "results.json").write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
