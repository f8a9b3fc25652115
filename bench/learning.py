"""Does the built-in RL run learn? Held-out success: the RL policy vs its warm start.

    .venv/bin/python -m bench.learning [--episodes 400] [--run-dir .data/bench-learning]

Runs the built-in default pipeline (``rollgym run``'s config: SFT warm start, GRPO against
the real server) in its own run dir, or resumes it there, then plays ``--episodes``
GuessNumber episodes on held-out task seeds with each policy, sampled at the training
temperature through the same server, and prints both success rates with 95% Wilson
intervals, their difference with a 95% Newcombe interval, and a two-sided two-proportion
z-test. RL "beats the warm start by a clear margin" when the difference's interval lies
above zero.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

from bench import quiet_training_output
from rollgym.trainer.evaluate import SuccessRate


def difference_interval(a: SuccessRate, b: SuccessRate) -> tuple[float, float]:
    """Newcombe's 95% interval for ``b.rate - a.rate`` from the two Wilson intervals."""
    d = b.rate - a.rate
    low = d - math.sqrt((b.rate - b.low) ** 2 + (a.high - a.rate) ** 2)
    high = d + math.sqrt((b.high - b.rate) ** 2 + (a.rate - a.low) ** 2)
    return low, high


def two_proportion_p(a: SuccessRate, b: SuccessRate) -> float:
    """Two-sided p-value of the pooled two-proportion z-test."""
    pooled = (a.successes + b.successes) / (a.episodes + b.episodes)
    se = math.sqrt(pooled * (1 - pooled) * (1 / a.episodes + 1 / b.episodes))
    if se == 0:
        return 1.0
    z = (b.rate - a.rate) / se
    return math.erfc(abs(z) / math.sqrt(2))


def main() -> None:
    quiet_training_output()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=400, help="held-out episodes per policy")
    parser.add_argument("--run-dir", type=Path, default=Path(".data/bench-learning"))
    args = parser.parse_args()

    from rollgym.run.pipeline import RunConfig, run_default
    from rollgym.trainer.config import parse_config

    config = parse_config(RunConfig, run_dir=args.run_dir, eval_episodes=args.episodes)
    load_before = os.getloadavg()
    report = run_default(config)
    warm, final = report.warm_start, report.final
    assert warm is not None and final is not None
    low, high = difference_interval(warm, final)
    steps = report.train.steps
    print(f"\nGuessNumber {config.task.env_kwargs}, {config.task.max_turns} turns, held-out seeds")
    print(f"{'policy':<22}{'success':>9}{'95% CI':>17}{'mean reward':>13}")
    for name, rate in (("warm start (SFT)", warm), (f"RL ({steps} GRPO steps)", final)):
        ci = f"{100 * rate.low:.1f}-{100 * rate.high:.1f}%"
        print(f"{name:<22}{100 * rate.rate:>8.1f}%{ci:>17}{rate.mean_reward:>13.3f}")
    print(
        f"difference {100 * (final.rate - warm.rate):+.1f} points "
        f"(95% CI {100 * low:+.1f} to {100 * high:+.1f}), "
        f"two-proportion z-test p = {two_proportion_p(warm, final):.2g}"
    )
    print(
        f"pipeline wall time {report.wall_s / 60:.1f} min; load average before "
        f"{load_before[0]:.1f}, after {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )


if __name__ == "__main__":
    main()
