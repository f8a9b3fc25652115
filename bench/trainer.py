"""Asynchronous vs synchronous GRPO on an environment-bound workload: time to a better agent.

    .venv/bin/python -m bench.trainer [--runs 1] [--first-seed 1] [--steps 120] [--async-steps 160]
                                      [--env-latency 0.5] [--latency lognormal|constant]
                                      [--modes sync,async-2,async-4]
                                      [--eval-episodes 200] [--eval-every 10]
                                      [--lr 2e-4] [--max-step-kl 0.02]
                                      [--importance-sampling token_truncate]

The workload is GuessNumber whose every step also waits, the way a sandboxed environment
waits on its container (registered below as ``bench.trainer:SlowGuessNumber-v0``, which
the server imports by Gymnasium's ``module:id`` syntax): ``--env-latency`` seconds each
(``constant``), or a draw from a lognormal of that mean whose p99 is 10x its median
(``lognormal``: sigma = ln 10 / 2.326 = 0.99, median 0.61 x the mean, p99 6.1 x the mean;
agent environments have such long tails: a test suite that hangs, a slow install). One
warm start (the built-in SFT) feeds, for each seed of ``--runs``, one GRPO run per mode,
each against a fresh server:

* ``sync``     ``max_staleness=0``: the trainer takes only samples of the weights it just
               pushed, so sampling and training take turns, and each step waits for its
               slowest episode; ``--steps`` steps;
* ``async-k``  ``max_staleness=k``: the server samples ahead while the trainer trains,
               within the window, and the groups that finish first are trained first, so
               the tail is hidden behind later groups; ``--async-steps`` steps (more than
               sync's: an async step costs less time and may teach less, so the time to a
               level decides, not the step count). Two ways to pay less for lag, added
               to the name: ``+mask`` drops the tokens whose importance ratio is above the
               cap from the loss instead of capping their weight (``importance_sampling=
               "token_mask"``, TRL's masked correction); ``+turn`` keeps a group that began
               before the window while its newest turn is in it, its older turns masked
               (``staleness_unit="turn"``: partial rollouts, ``rollgym.contract.staleness``).

A seed (``RunConfig.seed``) sets the trainer's seed, the training task seeds and the
engine's sampling seed; every mode of a seed uses the same. Every mode trains with the
built-in run's trust region (``--max-step-kl`` 0.02, ``trainer.trust_region``; 0 turns it
off): without it, a staleness-4 run of 2026-12-04 collapsed at its 21st step
(docs/benchmarks.md).

Every ``--eval-every`` steps the run's checkpoint is kept; after the run, each of them and
the warm start are scored on the same ``--eval-episodes`` held-out seeds, on GuessNumber
without the wait (one episode a seed), so the evaluation costs the run no time. Each point
is placed at the wall time its step ended, from the start of training. Printed per seed:
updates per minute and the ratio to ``sync``, drops, the curve, and each mode's time to
reach sync's final held-out success. Then over the seeds: that time as a share of sync's
own time to it, final success, the ratios; a diagnosis (means over steps: batch reward,
lag, KL of the samples' policy to the trainer's, importance ratios, tokens truncated,
groups dropped as stale with the reward of dropped and trained groups, turns masked as
stale, steps the trust region shortened or undid); the four stages' busy shares; and issue 43's targets: the best
asynchronous mode reaches sync's final success in at most half of sync's time, and ends
inside sync's 95% interval or above, in every seed. ``results.json`` holds every row.
The machine's load average is printed too: times compare only within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import os
import shutil
import statistics
import time
from pathlib import Path
from typing import Any, Literal, get_args

import gymnasium

from bench import quiet_training_output
from rollgym.envs.guess_number import GuessNumberEnv
from rollgym.trainer.config import ImportanceSampling

ENV_ID = "SlowGuessNumber-v0"
SERVED_ID = f"bench.trainer:{ENV_ID}"
MAX_TURNS = 3
WINDOW = 3  # held-out points pooled for a final success, and averaged for a time to a level
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


@dataclasses.dataclass(frozen=True)
class Mode:
    """One arm of the comparison, named as ``--modes`` names it (see the module docstring).

    >>> Mode.parse("async-2+turn")
    Mode(name='async-2+turn', staleness=2, token_mask=False, by_turn=True)
    """

    name: str
    staleness: int
    token_mask: bool = False
    by_turn: bool = False

    @classmethod
    def parse(cls, name: str) -> Mode:
        base, *options = name.split("+")
        if base != "sync" and not (base.startswith("async-") and base[6:].isdigit()):
            raise ValueError(f"a mode is sync or async-K, got {base!r} in {name!r}")
        unknown = set(options) - {"mask", "turn"}
        if unknown or len(set(options)) != len(options):
            raise ValueError(f"a mode's options are +mask and +turn, once each: {name!r}")
        staleness = 0 if base == "sync" else int(base[6:])
        if (base == "sync" or staleness == 0) and options:
            raise ValueError(f"+mask and +turn correct for lag, which sync has none of: {name!r}")
        return cls(name, staleness, "mask" in options, "turn" in options)


def parse_modes(spec: str) -> list[Mode]:
    """``--modes``: comma-separated, sync first (every share is of sync's time).

    >>> [m.name for m in parse_modes("sync,async-2,async-2+mask")]
    ['sync', 'async-2', 'async-2+mask']
    """
    modes = [Mode.parse(name.strip()) for name in spec.split(",")]
    if modes[0].name != "sync" or len(modes) < 2:
        raise ValueError(f"--modes starts with sync and names an asynchronous mode: {spec!r}")
    if len({m.name for m in modes}) != len(modes):
        raise ValueError(f"--modes names a mode twice: {spec!r}")
    return modes


def _run_mode(mode: Mode, seed: int, args: argparse.Namespace, warm_dir: Path) -> dict:
    """Train one mode from the warm start, then score its checkpoints every ``eval_every``
    steps (and the warm start, step 0) on the same held-out seeds, on the same server."""
    from bench.grpo_mode import served, train_timed
    from rollgym.run.demos import GUESS_RULES
    from rollgym.run.pipeline import RunConfig
    from rollgym.run.task import TaskConfig
    from rollgym.trainer.config import TrainerConfig
    from rollgym.trainer.evaluate import evaluate_weights, held_out_seeds

    steps = args.steps if mode.staleness == 0 else args.async_steps
    root = args.out / f"seed-{seed}" / mode.name
    shutil.rmtree(root, ignore_errors=True)
    game = {"low": 1, "high": 8, **GUESS_RULES}
    task = TaskConfig(
        env_id=SERVED_ID,
        env_kwargs={**game, "latency_s": args.env_latency, "latency": args.latency},
        max_turns=MAX_TURNS,
    )
    trainer_config = TrainerConfig(
        output_dir=root / "grpo",
        group_size=8,
        groups_per_batch=4,
        max_staleness=mode.staleness,
        total_steps=steps,
        learning_rate=args.lr,
        max_step_kl=args.max_step_kl or None,
        importance_sampling="token_mask" if mode.token_mask else args.importance_sampling,
        staleness_unit="turn" if mode.by_turn else "group",
        keep_checkpoints=steps + 1,  # every step's weights, scored after the run
    )
    run = RunConfig(
        run_dir=root, task=task, trainer=trainer_config, warmstart=None, eval_episodes=0, seed=seed
    )
    grpo_dir = trainer_config.output_dir
    settings = {"ROLLGYM_ENGINE__SEED": str(seed)}
    with served(warm_dir, root / "server", settings=settings) as client:
        timed = train_timed(run, client, warm_dir)
        curve = []
        for step in [0, *range(args.eval_every, steps + 1, args.eval_every)]:
            weights = warm_dir if step == 0 else grpo_dir / f"checkpoint-{step}"
            success = evaluate_weights(
                client,
                weights,
                env_id="rollgym/GuessNumber-v0",  # the same task without the wait
                env_kwargs=game,
                seeds=held_out_seeds(args.eval_episodes),
                max_turns=MAX_TURNS,
                sampling=run.sampling(),
            )
            curve.append(CurvePoint(step, timed.elapsed_s(step), success))
    for checkpoint in grpo_dir.glob("checkpoint-*"):  # 39 MB each; the numbers are kept
        shutil.rmtree(checkpoint)
    result = timed.result
    return {
        "mode": mode.name,
        "seed": seed,
        "staleness": mode.staleness,
        "steps": result.steps,
        "wall_s": timed.wall_s,
        "updates_per_min": timed.updates_per_min,
        "curve": curve,
        "success": final_success(curve),
        "shares": result.stage_shares,
        "dropped": result.dropped,
        "diagnosis": {**diagnose(result), **dropped_groups(root / "server")},
        "load": timed.load,
    }


@dataclasses.dataclass(frozen=True)
class CurvePoint:
    """Held-out success of the weights after ``step`` optimizer steps, ``at_s`` seconds
    after training started."""

    step: int
    at_s: float
    success: Any  # rollgym.trainer.evaluate.SuccessRate


def pooled(points: list[CurvePoint]) -> Any:
    """The points' episodes as one success rate (``SuccessRate``, its Wilson interval)."""
    from rollgym.trainer.evaluate import SuccessRate, wilson_interval

    successes = sum(p.success.successes for p in points)
    episodes = sum(p.success.episodes for p in points)
    reward = sum(p.success.mean_reward * p.success.episodes for p in points) / max(episodes, 1)
    return SuccessRate(successes, episodes, *wilson_interval(successes, episodes), reward)


def final_success(curve: list[CurvePoint]) -> Any:
    """A run's final held-out success: its last ``WINDOW`` points pooled (one point of 200
    episodes has a 95% interval of +-7 points; three pooled, +-4)."""
    return pooled(curve[-WINDOW:])


def time_to(curve: list[CurvePoint], level: float) -> float | None:
    """Seconds until the first point where the mean of the last ``WINDOW`` points reaches
    ``level`` (None: never): a level crossed by one lucky point does not count.

    >>> from rollgym.trainer.evaluate import SuccessRate
    >>> point = lambda at, k: CurvePoint(at, at, SuccessRate(k, 10, 0.0, 1.0, 0.0))
    >>> time_to([point(0, 4), point(10, 9), point(20, 4), point(30, 6), point(40, 7)], 0.6)
    40
    >>> time_to([point(0, 4), point(10, 9), point(20, 4)], 0.7) is None
    True
    """
    for end in range(WINDOW, len(curve) + 1):
        if pooled(curve[end - WINDOW : end]).rate >= level:
            return curve[end - 1].at_s
    return None


def diagnose(result: Any) -> dict[str, float]:
    """Means over a run's steps (a ``TrainResult``) of what tells an off-policy cost: the
    batch's reward, the samples' lag and KL to the trainer's policy, the importance ratios'
    tails and the share truncated; and the trust region's shortened and undone steps."""
    records = result.records

    def mean(key: str) -> float:
        values = [r.alarms[key] for r in records if key in r.alarms]
        return sum(values) / len(values) if values else float("nan")

    return {
        "reward": sum(r.reward_mean for r in records) / len(records),
        "lag": sum(r.version_lag_mean for r in records) / len(records),
        "kl_behaviour": mean("kl_behaviour"),
        "is_p01": mean("is_ratio_p01"),
        "is_p99": mean("is_ratio_p99"),
        "is_truncated": mean("is_truncated"),
        "turns_masked": result.dropped.stale_turns_masked,
        "shortened": result.shortened_steps,
        "undone": result.undone_steps,
    }


def dropped_groups(server_dir: Path) -> dict[str, float]:
    """What the staleness window dropped, from the server's archive: the share of groups,
    and the mean reward of the dropped groups and of the trained ones (a gap is a bias:
    groups that finish late, such as those of long failing episodes, are the ones dropped)."""
    from rollgym.server.buffer.archive import ArchiveFile

    rewards: dict[str, list[float]] = {"trained": [], "stale": []}
    with ArchiveFile(server_dir / "buffer.sqlite3") as archive:
        for page in archive.pages("groups"):
            for item in page.items:
                trajectories = item.group.trajectories
                mean = sum(t.reward for t in trajectories) / len(trajectories)
                rewards.setdefault(item.outcome, []).append(mean)
    trained, stale = rewards["trained"], rewards["stale"]
    return {
        "stale_share": len(stale) / max(len(stale) + len(trained), 1),
        "stale_reward": sum(stale) / len(stale) if stale else float("nan"),
        "trained_reward": sum(trained) / len(trained) if trained else float("nan"),
    }


def _print_run(rows: list[dict]) -> None:
    """One seed's modes: rates, drops, the curve and the time to sync's final success."""
    sync = rows[0]
    level = sync["success"].rate
    print(
        f"\nseed {sync['seed']}: sync's final held-out success (last {WINDOW} points pooled) "
        f"{sync['success']}"
    )
    print(
        f"{'mode':<18}{'updates/min':>12}{'vs sync':>9}{'wall s':>8}{'dropped':>9}"
        f"{'t to sync final':>17}  held-out success % by step (s from start)"
    )
    for row in rows:
        reached = time_to(row["curve"], level)
        shown = "never" if reached is None else f"{reached:.0f} s"
        curve = " ".join(f"{p.step}:{100 * p.success.rate:.0f}({p.at_s:.0f})" for p in row["curve"])
        print(
            f"{row['mode']:<18}{row['updates_per_min']:>12.2f}"
            f"{row['updates_per_min'] / sync['updates_per_min']:>8.2f}x{row['wall_s']:>8.0f}"
            f"{row['dropped'].total:>9}{shown:>17}  {curve}"
        )


def _print_summary(runs: list[list[dict]], args: argparse.Namespace) -> None:
    """Over the seeds: each mode's time to sync's final success as a share of sync's own,
    its final success, its rate, the diagnosis means, then the targets' verdict."""
    from rollgym.trainer.stages import STAGES

    wait = f"{args.env_latency:.2f}s per env step"
    if args.latency == "lognormal":
        wait = f"lognormal env steps (mean {args.env_latency:.2f}s, p99 10x the median)"
    trust = f", trust region {args.max_step_kl:g}" if args.max_step_kl else ", no trust region"
    print(
        f"\nGRPO on GuessNumber with {wait}, {args.steps} steps in sync, "
        f"{args.async_steps} in async, batch 4 groups x 8"
        f"{trust}, IS {args.importance_sampling} (+mask: token_mask); {len(runs)} seeds; held-out success on "
        f"{args.eval_episodes} seeds every {args.eval_every} steps"
    )
    modes = [row["mode"] for row in runs[0]]
    shares = shares_of_sync(runs)
    print(
        f"{'mode':<18}{'t to sync final, share of sync (per seed)':<46}"
        f"{'final success (per seed)':<28}updates/min vs sync"
    )
    for i, mode in enumerate(modes):
        cells = ", ".join("never" if s is None else f"{s:.2f}" for s in shares[mode])
        finals = ", ".join(f"{100 * rows[i]['success'].rate:.1f}%" for rows in runs)
        ratios = ", ".join(
            f"{rows[i]['updates_per_min'] / rows[0]['updates_per_min']:.2f}x" for rows in runs
        )
        print(f"{mode:<18}{cells:<46}{finals:<28}{ratios}")
    print("\nwhy (means over steps and seeds): batch reward, samples' lag in versions, KL to")
    print("the trainer's policy, importance ratio p01/p99, share of tokens truncated, groups")
    print("dropped as stale and the mean reward of dropped and trained groups, turns masked as")
    print("stale (+turn), steps the trust region shortened and undid")
    print(
        f"{'mode':<18}{'reward':>8}{'lag':>6}{'KL':>8}{'IS p01':>8}{'IS p99':>8}{'trunc':>7}"
        f"{'dropped':>9}{'r drop/kept':>13}{'masked':>8}{'shortened':>10}{'undone':>8}"
    )
    for i, mode in enumerate(modes):
        rows = [run[i] for run in runs]
        d = {k: sum(r["diagnosis"][k] for r in rows) / len(rows) for k in rows[0]["diagnosis"]}
        rewards = f"{d['stale_reward']:.2f}/{d['trained_reward']:.2f}"
        print(
            f"{mode:<18}{d['reward']:>8.3f}{d['lag']:>6.2f}{d['kl_behaviour']:>8.4f}"
            f"{d['is_p01']:>8.2f}{d['is_p99']:>8.2f}{100 * d['is_truncated']:>6.1f}%"
            f"{100 * d['stale_share']:>8.0f}%{rewards:>13}{d.get('turns_masked', 0):>8.0f}"
            f"{d['shortened']:>10.1f}{d['undone']:>8.1f}"
        )
    print("\nbusy share of each stage (rest: waiting), per mode, first seed")
    print(f"{'mode':<18}" + "".join(f"{stage:>13}" for stage in STAGES))
    for row in runs[0]:
        cells = []
        for stage in STAGES:
            busy, waiting = row["shares"][stage]
            cells.append(f"{100 * busy / max(busy + waiting, 1e-9):>12.0f}%")
        print(f"{row['mode']:<18}" + "".join(cells))
    print("", *verdict_lines(runs, shares), sep="\n")
    loads = ", ".join(f"{r['mode']} {r['load'][0]:.1f}->{r['load'][1]:.1f}" for r in runs[0])
    print(f"\nload average (1 min) before->after, first seed: {loads} on {os.cpu_count()} cores")


def shares_of_sync(runs: list[list[dict]]) -> dict[str, list[float | None]]:
    """Per mode and seed: its time to sync's final held-out success over sync's own time to
    it (None: never reached; sync's own is 1, or None when its curve starts there)."""
    shares: dict[str, list[float | None]] = {row["mode"]: [] for row in runs[0]}
    for rows in runs:
        sync = rows[0]
        level = sync["success"].rate
        theirs = time_to(sync["curve"], level)
        for row in rows:
            mine = time_to(row["curve"], level)
            shares[row["mode"]].append(None if mine is None or not theirs else mine / theirs)
    return shares


def verdict_lines(runs: list[list[dict]], shares: dict[str, list[float | None]]) -> list[str]:
    """Issue 43's targets for the best asynchronous mode: sync's final success reached in at
    most half of sync's time, and a final success inside sync's 95% interval or above, in
    every seed. The best mode meets the two in the most seeds; of equals, the one with the
    lowest median share of sync's time."""
    n = len(runs)
    modes = [row["mode"] for row in runs[0]]

    def median_share(mode: str) -> float:
        return statistics.median(math.inf if s is None else s for s in shares[mode])

    def fast(mode: str) -> int:
        return sum(s is not None and s <= 0.5 for s in shares[mode])

    def kept(mode: str) -> int:
        i = modes.index(mode)
        return sum(rows[i]["success"].rate >= rows[0]["success"].low for rows in runs)

    best = min(modes[1:], key=lambda m: (-(fast(m) + kept(m)), median_share(m)))
    best_share = median_share(best)
    return [
        f"best asynchronous mode: {best} (median share of sync's time "
        f"{'never' if math.isinf(best_share) else f'{best_share:.2f}'})",
        f"  {'met' if fast(best) == n else 'NOT MET':<8}reaches sync's final success in <= half "
        f"sync's time: {fast(best)} of {n} seeds",
        f"  {'met' if kept(best) == n else 'NOT MET':<8}final success inside sync's 95% CI or "
        f"above: {kept(best)} of {n} seeds",
    ]


def main() -> None:
    quiet_training_output()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # The built-in run's steps and learning rate: long enough for sync to stop rising.
    parser.add_argument("--steps", type=int, default=120, help="the sync mode's steps")
    parser.add_argument(
        "--async-steps",
        type=int,
        default=160,
        help="each async mode's steps: more than sync's, since an async step costs less time "
        "and may teach less; the time to a level decides, not the step count",
    )
    parser.add_argument("--env-latency", type=float, default=0.5, help="mean seconds per step")
    parser.add_argument("--latency", choices=["constant", "lognormal"], default="lognormal")
    parser.add_argument(
        "--modes",
        default="sync,async-2,async-4",
        help="sync first, then async-K, each with +mask and/or +turn (see above)",
    )
    parser.add_argument("--runs", type=int, default=1, help="seeds, each playing every mode")
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--eval-episodes", type=int, default=200, help="held-out seeds a point")
    parser.add_argument("--eval-every", type=int, default=10, help="steps between points")
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument(
        "--max-step-kl", type=float, default=0.02, help="the trust region (built-in run's); 0: off"
    )
    parser.add_argument(
        "--importance-sampling",
        default="token_truncate",
        choices=list(get_args(ImportanceSampling)),
        help="how the trainer corrects for the samples' policy (TrainerConfig's)",
    )
    parser.add_argument("--out", type=Path, default=Path(".data/bench-trainer"))
    parser.add_argument(
        "--report", type=Path, metavar="RESULTS_JSON", help="print a finished run's tables again"
    )
    args = parser.parse_args()
    if args.report:
        _report(args.report)
        return
    args.out = args.out.resolve()
    if args.steps % args.eval_every or args.async_steps % args.eval_every:
        parser.error("--steps and --async-steps must be multiples of --eval-every")
    try:
        modes = parse_modes(args.modes)
    except ValueError as error:
        parser.error(str(error))

    from rollgym.contract import paths
    from rollgym.run.warmstart import WarmStartConfig, warm_start

    warm_dir = warm_start(
        WarmStartConfig(), paths.default_model_dir(), args.out / "warmstart", printer=print
    )
    runs = []
    for seed in range(args.first_seed, args.first_seed + args.runs):
        rows = [_run_mode(mode, seed, args, warm_dir) for mode in modes]
        _print_run(rows)
        runs.append(rows)
        _save(runs, args, args.out / "results.json")
    _print_summary(runs, args)


def _save(runs: list[list[dict]], args: argparse.Namespace, path: Path) -> None:
    """The run's settings and every row, its curve and diagnosis, as JSON (after each seed);
    ``--report`` prints the tables again from it."""

    def plain(row: dict) -> dict:
        curve = [
            {"step": p.step, "at_s": p.at_s, "success": dataclasses.asdict(p.success)}
            for p in row["curve"]
        ]
        return {
            **row,
            "curve": curve,
            "success": str(row["success"]),
            "dropped": row["dropped"].model_dump(),
        }

    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    runs_out = [[plain(row) for row in rows] for rows in runs]
    path.write_text(json.dumps({"args": settings, "runs": runs_out}, indent=2))


def _load(path: Path) -> tuple[argparse.Namespace, list[list[dict]]]:
    """What ``_save`` wrote, as the rows the tables print (the final success recomputed)."""
    from rollgym.trainer.checkpoint import DropCounts
    from rollgym.trainer.evaluate import SuccessRate

    saved = json.loads(path.read_text())

    def row(data: dict) -> dict:
        curve = [
            CurvePoint(p["step"], p["at_s"], SuccessRate(**p["success"])) for p in data["curve"]
        ]
        shares = {stage: tuple(pair) for stage, pair in data["shares"].items()}
        dropped = DropCounts(**data["dropped"])
        return {
            **data,
            "curve": curve,
            "success": final_success(curve),
            "shares": shares,
            "dropped": dropped,
        }

    runs = [[row(data) for data in rows] for rows in saved["runs"]]
    return argparse.Namespace(**saved["args"]), runs


def _report(path: Path) -> None:
    args, runs = _load(path)
    for rows in runs:
        _print_run(rows)
    _print_summary(runs, args)


if __name__ == "__main__":
    main()
