"""A curriculum against uniform sampling, on an easy/hard mixture of the tool task: held-out
success on the hard part after the same steps.

    .venv/bin/python -m bench.curriculum [--runs 3] [--steps 120] [--episodes 100]
                                         [--seed-pool 32] [--run-dir .data/bench-curriculum]

The mixture is the built-in run's task split by difficulty, each part an env of its own
(registered here, reached as ``bench.curriculum:<id>``): ``bench/ComputeEasy-v0`` (``add``
and ``sum``, which the warm start solves often) at weight 2 and ``bench/ComputeMul-v0``
(``mul``, which it solves about 2% of the time) at weight 1, so the kinds keep the built-in
run's shares. Both train on the same ``--seed-pool`` task seeds, cycled.

One warm start (the built-in run's SFT, seed 0) is made first and is every run's starting
policy. Then per seed 0 .. runs-1 two arms, each the built-in run's GRPO (``rollgym run``'s
pipeline, ``--steps`` steps against a fresh server with its warm pool) from that policy:

- ``uniform``: the pool's tasks in turn, flat groups dropped after they are played;
- ``curriculum``: ``task.curriculum`` at its defaults (a task whose last 2 groups were all
  solved or all failed is played with probability 0.1).

Prints per run each env's held-out success (warm start, after RL; 95% Wilson intervals),
the seconds the trainer waited for groups, and the wall time; then, per env, the median and
range over seeds of the difference curriculum - uniform after RL.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
from pathlib import Path
from typing import TYPE_CHECKING

import gymnasium

from bench import quiet_training_output

if TYPE_CHECKING:
    from rollgym.run.pipeline import RunReport
    from rollgym.run.summary import HeldOut
    from rollgym.trainer.evaluate import SuccessRate

MODULE = "bench.curriculum"  # not __name__: run with -m, this module is __main__
EASY, HARD = "bench/ComputeEasy-v0", "bench/ComputeMul-v0"
ENTRY = "rollgym.envs.compute:ComputeEnv"
for _id, _kinds in ((EASY, ["add", "sum"]), (HARD, ["mul"])):
    if _id not in gymnasium.registry:  # the server imports this module to find the envs
        gymnasium.register(_id, entry_point=ENTRY, max_episode_steps=4, kwargs={"kinds": _kinds})
ARMS = ("uniform", "curriculum")


def mixture(preset_task: dict, seed_pool: int, curriculum: bool) -> dict:
    """The ``task`` table of an arm: the two envs by weight on a seed pool, with the built-in
    run's tokens, temperature and boxes (a new env id would start from the task's defaults)."""
    keep = ("max_turns", "max_tokens", "temperature", "sandboxes")
    return {
        **{name: preset_task[name] for name in keep},
        "env_id": f"{MODULE}:{EASY}",
        "env_kwargs": {},
        "weight": 2.0,
        "mixture": [
            {"env_id": f"{MODULE}:{HARD}", "weight": 1.0, "max_turns": preset_task["max_turns"]}
        ],
        "seed_pool": seed_pool,
        "curriculum": {} if curriculum else None,
    }


def main() -> None:
    quiet_training_output()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="seeds 0 .. runs-1, both arms each")
    parser.add_argument("--steps", type=int, default=120, help="GRPO steps per arm")
    parser.add_argument("--episodes", type=int, default=100, help="held-out seeds per env")
    parser.add_argument("--seed-pool", type=int, default=32)
    parser.add_argument("--run-dir", type=Path, default=Path(".data/bench-curriculum"))
    args = parser.parse_args()

    from rollgym.run.flags import layered, preset_base
    from rollgym.run.pipeline import RunConfig, run_default
    from rollgym.run.warmstart import warm_start
    from rollgym.trainer.config import parse_config

    base = preset_base("default")
    start = parse_config(RunConfig, **layered(base, {"seed": 0}))
    warmstart = start.resolved_warmstart()
    assert warmstart is not None
    warm_dir = warm_start(warmstart, start.model_dir, args.run_dir / "warmstart", printer=print)

    rows: list[tuple[int, str, RunReport]] = []
    for seed in range(args.runs):
        for arm in ARMS:
            run_dir = args.run_dir / f"seed-{seed}-{arm}"
            shutil.rmtree(run_dir, ignore_errors=True)  # a fresh run, never a resumed one
            layer = {
                "run_dir": str(run_dir),
                "model_dir": str(warm_dir),
                "warmstart": None,
                "seed": seed,
                "eval_episodes": args.episodes,
                "task": mixture(base["task"], args.seed_pool, arm == "curriculum"),
                "trainer": {"total_steps": args.steps},
            }
            config = parse_config(RunConfig, **layered(base, layer))
            rows.append((seed, arm, run_default(config)))
            _print_table(rows, args)
    _print_differences(rows)


def _print_table(rows: list[tuple[int, str, RunReport]], args: argparse.Namespace) -> None:
    print(
        f"\n{EASY} (add, sum) x2 + {HARD} (mul) x1, seed pool {args.seed_pool}, "
        f"{args.steps} GRPO steps, {args.episodes} held-out seeds per env (success, 95% CI)"
    )
    print(
        f"{'seed':>4} {'arm':<11}{'easy: warm start':>22}{'easy: after RL':>22}"
        f"{'hard: warm start':>22}{'hard: after RL':>22}{'waited':>9}{'wall':>8}"
    )
    for seed, arm, report in rows:
        easy, hard = _held_out(report, EASY), _held_out(report, HARD)
        waited = sum(record.wait_s for record in report.train.records)
        print(
            f"{seed:>4} {arm:<11}{_rate(easy.warm_start):>22}{_rate(easy.final):>22}"
            f"{_rate(hard.warm_start):>22}{_rate(hard.final):>22}{waited:>8.0f}s"
            f"{report.wall_s / 60:>7.1f}m"
        )


def _held_out(report: RunReport, env_id: str) -> HeldOut:
    return report.per_env[f"{MODULE}:{env_id}"]


def _rate(rate: SuccessRate | None) -> str:
    if rate is None:
        return "-"
    return f"{100 * rate.rate:.1f}% ({100 * rate.low:.0f}-{100 * rate.high:.0f})"


def _print_differences(rows: list[tuple[int, str, RunReport]]) -> None:
    by_seed: dict[int, dict[str, RunReport]] = {}
    for seed, arm, report in rows:
        by_seed.setdefault(seed, {})[arm] = report
    print("\ncurriculum - uniform after RL, points of held-out success (median, range over seeds)")
    for env_id in (EASY, HARD):
        diffs = []
        for arms in by_seed.values():
            uniform, curriculum = (_held_out(arms[arm], env_id).final for arm in ARMS)
            if uniform is not None and curriculum is not None:
                diffs.append(100 * (curriculum.rate - uniform.rate))
        if diffs:
            print(
                f"  {env_id}: {statistics.median(diffs):+.1f} "
                f"({min(diffs):+.1f} to {max(diffs):+.1f}) over {len(diffs)} seeds"
            )


if __name__ == "__main__":
    main()
