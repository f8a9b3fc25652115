"""rollgym against TRL alone on the built-in task: the time each takes to a better agent.

    .venv/bin/python -m bench.peers [--runs 3] [--first-seed 0] [--steps 6] [--eval-every 1]
                                    [--eval-episodes 100] [--arms trl-vllm,rollgym,rollgym-sync]
                                    [--lr 1e-5] [--max-step-kl 0] [--out DIR]
                                    [--report RESULTS_JSON]

A user choosing a tool compares it with what they would use instead. One task, one model,
one warm start, the same GRPO settings, run each way:

* ``rollgym``         the built-in run's task and recipe (``make run``, preset ``default``):
                      SmolLM2 on ``rollgym/Compute-v0`` in hardened boxes, the rollout server
                      (vLLM in its own process) sampling a step ahead of the trainer
                      (staleness 1); ``rollgym-sync`` the same with staleness 0;
* ``trl``, ``trl-cb``, ``trl-vllm``  **TRL alone** (``bench.peers_trl``):
                      ``GRPOTrainer(environment_factory=...)`` on the same env through
                      rollgym's TRL door, one ``docker exec`` per tool call, generation in
                      the trainer's process by transformers' ``generate`` (``trl``), its
                      continuous batching (``trl-cb``) or TRL's colocated vLLM (``trl-vllm``,
                      with the weight sync made to work on a CPU). Sampling, the environment
                      and training take turns.

The warm start is the built-in run's (its SFT on Compute demonstrations), made once in
``--out`` and shared by every run and arm. Every arm trains ``--steps`` optimizer steps of
2 groups of 8 at the preset's temperature and ``--lr`` (the default, 1e-5, is TRL's best of
three measured: docs/benchmarks.md); rollgym's trust region (``--max-step-kl``, 0.02 in the
built-in run) is off by default, since TRL has none. A seed sets the trainer's seed, the
training task seeds (both arms take the same seeds in the same order) and the engine's
sampling seed. Every arm keeps its weights every ``--eval-every`` steps; after the run they
are scored, with the warm start, on the same ``--eval-episodes`` held-out seeds through one
rollout server (``trainer.evaluate``: the engine, the boxes and the sampling of the built-in
run's own evaluation), so scoring costs no arm time. A point sits at the seconds from the
arm's ``train`` call to its step's end (loading is left out).

A run's final success pools its last 3 points (``bench.trainer.final_success``); it
reaches a level when the mean of 3 points in a row does (``time_to``). Printed per run:
updates per minute, the environment's share of the wall, peak memory, the curve, the gain
over the warm start with its 95% interval, and each arm's time to the first TRL arm's
final success with its share of that arm's own. Then issue 42's targets, over every run:
both arms learn (each gain's interval above 0), the best rollgym arm reaches TRL's final
success in at most a quarter of TRL's time, and ends inside TRL's interval or above.

Where the arms cannot be the same: TRL's loop ends a rollout when the model answers without
a call or after ``max_tool_calling_iterations`` calls (here ``max_turns - 1``, so both allow
three replies), with one token budget for the whole rollout (``max_completion_length``),
where rollgym caps each turn; TRL samples on the policy it trains, rollgym corrects for
the engine's sampling and filters groups whose rewards are all equal (they teach GRPO
nothing) before training. The built-in run's online evaluations and the guard that acts on
them are off (the points are scored after the run, for both arms alike).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import quiet_training_output
from bench.learning import difference_interval
from bench.trainer import CurvePoint, final_success, time_to

ARMS = ("trl", "trl-cb", "trl-vllm", "rollgym", "rollgym-sync")
TRL_GENERATION = {"trl": "transformers", "trl-cb": "continuous", "trl-vllm": "vllm"}
TARGET_SHARE = 0.25  # issue 42: rollgym at TRL's final success in a quarter of TRL's time
GAIN_SHARE = 0.9  # the second level: the warm start plus this share of TRL's gain
TOOL_REPLY_TOKENS = 32  # a tool's reply between two turns, with the template's markup


@dataclasses.dataclass(frozen=True)
class ArmRun:
    """One arm of one run: its timing and its curve once scored; ``error`` if it failed."""

    arm: str
    seed: int
    step_s: list[float] = dataclasses.field(default_factory=list)  # train() to step ends
    wall_s: float = float("nan")
    env_share: float = float("nan")
    peak_mib: float = float("nan")
    checkpoints: dict[int, str] = dataclasses.field(default_factory=dict)  # step -> weights
    rewards: list[float] = dataclasses.field(default_factory=list)  # each step's batch mean
    curve: list[CurvePoint] = dataclasses.field(default_factory=list)
    error: str | None = None

    @property
    def is_trl(self) -> bool:
        return self.arm.startswith("trl")

    @property
    def updates_per_min(self) -> float:
        """Optimizer steps per minute from the first step's end to the last's."""
        from bench.grpo_mode import steps_per_min

        return steps_per_min(self.step_s)


# --- the configuration: the built-in run's ---------------------------------------------


def run_config(
    args: argparse.Namespace, seed: int, root: Path, staleness: int | None = None
) -> Any:
    """The built-in run's ``RunConfig`` for ``seed``: no warm start (given), no evaluation
    of its own, ``--steps`` steps, the weights kept every ``--eval-every`` steps."""
    from rollgym.run.flags import layered, preset_base
    from rollgym.run.pipeline import RunConfig
    from rollgym.trainer.config import parse_config

    trainer: dict[str, Any] = {
        "learning_rate": args.lr,
        "max_step_kl": args.max_step_kl or None,
        "total_steps": args.steps,
        "online_eval": None,  # scored after the run instead, for both arms
        "guard": None,  # it acts on online evaluations
        "checkpoint_every": args.eval_every,
        "keep_checkpoints": max(args.steps, 2),
    }
    if staleness is not None:
        trainer["max_staleness"] = staleness
    run = {"run_dir": root, "seed": seed, "warmstart": None, "eval_episodes": 0}
    return parse_config(RunConfig, **layered(preset_base("default"), run, {"trainer": trainer}))


def warm_start_dir(args: argparse.Namespace) -> Path:
    """The built-in run's warm start, made once in ``--out`` (idempotent)."""
    from rollgym.run.flags import preset_base
    from rollgym.run.pipeline import RunConfig
    from rollgym.run.warmstart import warm_start
    from rollgym.trainer.config import parse_config

    config = parse_config(RunConfig, **preset_base("default"))
    warmstart = config.resolved_warmstart()
    assert warmstart is not None, "the built-in run has a warm start"
    return warm_start(warmstart, config.model_dir, args.out / "warmstart", printer=print)


def eval_steps(args: argparse.Namespace) -> list[int]:
    return list(range(args.eval_every, args.steps + 1, args.eval_every))


# --- the arms, each in a child process -----------------------------------------------------


def run_rollgym_arm(arm: str, seed: int, args: argparse.Namespace, warm_dir: Path) -> ArmRun:
    from bench.grpo_mode import served, train_timed
    from bench.memory import PeakRss
    from rollgym.run.pipeline import server_settings

    root = args.out / f"seed-{seed}" / arm
    config = run_config(args, seed, root, staleness=0 if arm == "rollgym-sync" else None)
    settings = {**server_settings(config), "ROLLGYM_ENGINE__SEED": str(seed)}
    with PeakRss() as peak, served(warm_dir, root / "server", settings, config.threads) as client:
        timed = train_timed(config, client, warm_dir)
    busy, waiting = timed.result.stage_shares["environment"]
    return ArmRun(
        arm=arm,
        seed=seed,
        step_s=[timed.elapsed_s(step) for step in range(1, timed.result.steps + 1)],
        wall_s=timed.wall_s,
        env_share=busy / max(busy + waiting, 1e-9),
        peak_mib=peak.mib,
        checkpoints={s: str(config.grpo.output_dir / f"checkpoint-{s}") for s in eval_steps(args)},
        rewards=[record.reward_mean for record in timed.result.records],
    )


def run_trl_arm(arm: str, seed: int, args: argparse.Namespace, warm_dir: Path) -> ArmRun:
    import torch

    from bench.memory import PeakRss
    from bench.peers_trl import ExecPool, train_trl
    from rollgym.doors.trl import TrlEnvironments
    from rollgym.envs.compute import PYTHON_TOOL

    torch.set_num_threads(os.cpu_count() or 1)  # one process: generation and training
    root = args.out / f"seed-{seed}" / arm
    config = run_config(args, seed, root)
    task = config.task
    trainer = config.grpo  # TRL has no trust region: its max_step_kl is never read
    # the rollout job's training seeds, in its order (seed 0: 0, 1, 2, ...)
    seeds = config.rollout_job().seeds or range(args.steps * trainer.groups_per_batch)
    pool = ExecPool(trainer.group_size * trainer.groups_per_batch)
    environments = TrlEnvironments(
        task.env_id, sandbox_pool=pool, max_turns=task.max_turns, **task.env_kwargs
    )
    try:
        with PeakRss() as peak:
            run = train_trl(
                trainer,
                warm_dir,
                environments,
                list(seeds)[: args.steps * trainer.groups_per_batch],
                [PYTHON_TOOL.to_openai()],
                max_completion_length=task.max_turns * task.max_tokens
                + (task.max_turns - 1) * TOOL_REPLY_TOKENS,
                max_turns=task.max_turns - 1,  # calls; the reply after the last is the answer
                generation=TRL_GENERATION[arm],
                save_every=args.eval_every,
            )
    finally:
        environments.close()
        pool.close()
    return ArmRun(
        arm=arm,
        seed=seed,
        step_s=run.step_s,
        wall_s=run.wall_s,
        env_share=run.env_s / run.wall_s,
        peak_mib=peak.mib,
        checkpoints={s: str(trainer.output_dir / f"checkpoint-{s}") for s in eval_steps(args)},
        rewards=[log["reward"] for log in run.trl_logs if "reward" in log],
    )


def arm_in_child(arm: str, seed: int, args: argparse.Namespace) -> ArmRun:
    """Run ``arm`` in a fresh interpreter (its memory its own); its timing, or why it failed."""
    root = args.out / f"seed-{seed}" / arm
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    command = [
        sys.executable, "-m", "bench.peers", "--only-arm", arm, "--first-seed", str(seed),
        "--steps", str(args.steps), "--eval-every", str(args.eval_every), "--out", str(args.out),
        "--lr", str(args.lr), "--max-step-kl", str(args.max_step_kl),
    ]  # fmt: skip
    with (root / "arm.log").open("wb") as log:
        code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
    result = root / "arm.json"
    if code == 0 and result.is_file():
        return arm_from_json(json.loads(result.read_text()))
    lines = (root / "arm.log").read_text(errors="replace").strip().splitlines()
    return ArmRun(arm, seed, error=f"exit code {code}: {lines[-1] if lines else 'no output'}")


def score(runs: list[ArmRun], seed: int, args: argparse.Namespace, warm_dir: Path) -> Any:
    """Held-out success of the warm start and of every arm's kept weights, on one server;
    the warm start's, and ``runs`` with their curves (the kept weights deleted after)."""
    from bench.grpo_mode import served
    from rollgym.run.pipeline import server_settings
    from rollgym.trainer.evaluate import evaluate_weights, held_out_seeds

    config = run_config(args, seed, args.out / f"seed-{seed}" / "eval")
    task = config.task
    settings = {**server_settings(config), "ROLLGYM_ENGINE__SEED": str(seed)}

    def success(client: Any, weights: str | Path) -> Any:
        return evaluate_weights(
            client,
            Path(weights),
            env_id=task.env_id,
            env_kwargs=dict(task.env_kwargs),
            seeds=held_out_seeds(args.eval_episodes),
            max_turns=task.max_turns,
            sampling=config.sampling(),
        )

    scored = []
    with served(warm_dir, config.run_dir / "server", settings) as client:
        warm = success(client, warm_dir)
        for run in runs:
            if run.error is not None:
                scored.append(run)
                continue
            curve = [CurvePoint(0, 0.0, warm)]
            for step, weights in sorted(run.checkpoints.items()):
                curve.append(CurvePoint(step, run.step_s[step - 1], success(client, weights)))
                shutil.rmtree(weights)  # 0.5 GB each; the numbers are kept
            scored.append(dataclasses.replace(run, curve=curve))
    for policy in (args.out / f"seed-{seed}").glob("*/server/policy"):
        shutil.rmtree(policy)  # the servers' last weights, 1.1 GB each; their logs are kept
    return warm, scored


# --- the tables --------------------------------------------------------------------------


def level_of(runs: Sequence[ArmRun]) -> tuple[ArmRun | None, float | None]:
    """The first TRL arm that ran, and its final success (the level every arm is timed to)."""
    trl = next((r for r in runs if r.is_trl and r.error is None and r.curve), None)
    return trl, (final_success(trl.curve).rate if trl else None)


def gain_level(runs: Sequence[ArmRun]) -> float | None:
    """The second level: the warm start plus ``GAIN_SHARE`` of the TRL arm's gain. Near 100%
    TRL's final asks for three points in a row at it, which noise alone can deny an arm
    that ends as well; this level every arm that learns crosses on its way up."""
    trl, final = level_of(runs)
    if trl is None or final is None:
        return None
    warm = trl.curve[0].success.rate
    return warm + GAIN_SHARE * (final - warm)


def shares(runs: Sequence[ArmRun], level: float | None = None) -> dict[str, float | None]:
    """Each arm's time to ``level`` (default: the TRL arm's final success), as a share of
    the TRL arm's own time to it."""
    trl, final = level_of(runs)
    level = final if level is None else level
    if trl is None or level is None:
        return {}
    base = time_to(trl.curve, level)
    out: dict[str, float | None] = {}
    for run in runs:
        at = time_to(run.curve, level) if run.curve else None
        out[run.arm] = None if at is None or not base else at / base
    return out


def gain(run: ArmRun) -> tuple[float, float, float]:
    """The final success over the warm start (the curve's first point), with Newcombe's
    95% interval, in points."""
    warm, final = run.curve[0].success, final_success(run.curve)
    low, high = difference_interval(warm, final)
    return 100 * (final.rate - warm.rate), 100 * low, 100 * high


def run_lines(warm: Any, runs: Sequence[ArmRun]) -> list[str]:
    trl, level = level_of(runs)
    second = gain_level(runs)
    to_final, to_gain = shares(runs), shares(runs, second)
    named = f"{trl.arm}'s final {100 * level:.1f}%" if trl and level is not None else "none"
    lines = [
        f"seed {runs[0].seed}: warm start {warm}; levels: {named}"
        + (f", {100 * GAIN_SHARE:.0f}% of its gain {100 * second:.1f}%" if second else ""),
        f"{'arm':<13}{'upd/min':>8}{'env':>6}{'peak MiB':>9}{'wall s':>8}{'final':>8}"
        f"{'gain (95% CI)':>22}{'to final':>14}{'to 90% gain':>14}  curve (s: %)",
    ]
    for run in runs:
        if run.error is not None or not run.curve:
            lines.append(f"{run.arm:<13}failed: {run.error}")
            continue
        final = final_success(run.curve)
        points, low, high = gain(run)
        curve = " ".join(f"{p.at_s:.0f}:{100 * p.success.rate:.0f}" for p in run.curve)
        lines.append(
            f"{run.arm:<13}{run.updates_per_min:>8.2f}{100 * run.env_share:>5.0f}%"
            f"{run.peak_mib:>9.0f}{run.wall_s:>8.0f}{100 * final.rate:>7.1f}%"
            f"{f'{points:+.1f} ({low:+.1f}, {high:+.1f})':>22}"
            f"{_timed(run, level, to_final):>14}{_timed(run, second, to_gain):>14}  {curve}"
        )
    return lines


def _timed(run: ArmRun, level: float | None, share_of: dict[str, float | None]) -> str:
    """``seconds (share)`` to ``level``, or ``never``."""
    at = time_to(run.curve, level) if level is not None else None
    share = share_of.get(run.arm)
    return "never" if at is None else f"{at:.0f} s ({'-' if share is None else f'{share:.2f}'})"


def verdict_lines(runs_by_seed: Sequence[Sequence[ArmRun]]) -> list[str]:
    """Issue 42's targets over every run, for the rollgym arm with the lowest median share."""
    if not runs_by_seed:
        return ["no verdict: no run"]
    all_shares = [shares(runs) for runs in runs_by_seed]
    ran = [{r.arm for r in runs if not r.is_trl and r.error is None} for runs in runs_by_seed]
    arms = set.intersection(*ran)  # rollgym arms that ran in every run
    if not arms or not all(all_shares):
        return ["no verdict: it needs a TRL arm and a rollgym arm that ran in every run"]

    def median_share(arm: str) -> float:
        values = [s.get(arm) for s in all_shares]
        return statistics.median(v if v is not None else float("inf") for v in values)

    best = min(sorted(arms), key=median_share)
    n = len(runs_by_seed)
    within = sum((s.get(best) or float("inf")) <= TARGET_SHARE for s in all_shares)
    as_good = learned = 0
    for runs in runs_by_seed:
        trl, _ = level_of(runs)
        ours = next((r for r in runs if r.arm == best and r.curve), None)
        if trl is None or ours is None:
            continue
        as_good += final_success(ours.curve).rate >= final_success(trl.curve).low
        learned += gain(ours)[1] > 0 and gain(trl)[1] > 0

    def shown(values: Sequence[dict[str, float | None]]) -> str:
        return ", ".join("never" if v.get(best) is None else f"{v[best]:.2f}" for v in values)

    second = [shares(runs, gain_level(runs)) for runs in runs_by_seed]

    def verdict(count: int) -> str:
        return "met" if count == n else "NOT MET"

    return [
        f"best rollgym arm: {best} (time to TRL's final success, share of TRL's: "
        f"{shown(all_shares)}; to {100 * GAIN_SHARE:.0f}% of TRL's gain: {shown(second)})",
        f"  {verdict(learned):<8}both arms learn (each gain's 95% interval above 0): {learned} of {n}",
        f"  {verdict(within):<8}<= {TARGET_SHARE:g} of TRL's time to its final success: "
        f"{within} of {n}",
        f"  {verdict(as_good):<8}ends inside TRL's 95% interval or above: {as_good} of {n}",
    ]


def print_report(results: list[tuple[Any, list[ArmRun]]]) -> None:
    for warm, runs in results:
        print("\n" + "\n".join(run_lines(warm, runs)))
    print("\n" + "\n".join(verdict_lines([runs for _, runs in results])))
    print(f"\non {os.cpu_count()} cores; load average now {os.getloadavg()[0]:.1f}")


# --- results.json --------------------------------------------------------------------------


def arm_to_json(run: ArmRun) -> dict[str, Any]:
    data = dataclasses.asdict(run)
    data["curve"] = [
        {"step": p.step, "at_s": p.at_s, "success": dataclasses.asdict(p.success)}
        for p in run.curve
    ]
    return data


def arm_from_json(data: dict[str, Any]) -> ArmRun:
    from rollgym.trainer.evaluate import SuccessRate

    curve = [CurvePoint(p["step"], p["at_s"], SuccessRate(**p["success"])) for p in data["curve"]]
    checkpoints = {int(step): path for step, path in data["checkpoints"].items()}
    return ArmRun(**{**data, "curve": curve, "checkpoints": checkpoints})


def save(results: list[tuple[Any, list[ArmRun]]], args: argparse.Namespace) -> None:
    data = {
        "args": {k: str(v) for k, v in vars(args).items()},
        "runs": [
            {"warm_start": dataclasses.asdict(warm), "arms": [arm_to_json(r) for r in runs]}
            for warm, runs in results
        ],
        "verdict": verdict_lines([runs for _, runs in results]),
    }
    (args.out / "results.json").write_text(json.dumps(data, indent=2))


def load(path: Path) -> list[tuple[Any, list[ArmRun]]]:
    from rollgym.trainer.evaluate import SuccessRate

    data = json.loads(path.read_text())
    return [
        (SuccessRate(**run["warm_start"]), [arm_from_json(arm) for arm in run["arms"]])
        for run in data["runs"]
    ]


def main() -> None:
    quiet_training_output()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs, seeds first-seed ...")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=6, help="optimizer steps per arm")
    parser.add_argument("--eval-every", type=int, default=1, help="steps between scored points")
    parser.add_argument("--eval-episodes", type=int, default=100, help="held-out seeds a point")
    parser.add_argument(
        "--arms", default="trl-vllm,rollgym,rollgym-sync", help=f"some of {','.join(ARMS)}"
    )
    parser.add_argument("--lr", type=float, default=1e-5, help="every arm's learning rate")
    parser.add_argument(
        "--max-step-kl",
        type=float,
        default=0.0,
        help="rollgym's trust region (TRL has none); 0: off",
    )
    parser.add_argument("--out", type=Path, default=Path(".data/bench-peers"))
    parser.add_argument("--report", type=Path, help="print a finished run's results.json again")
    parser.add_argument("--only-arm", choices=ARMS, help=argparse.SUPPRESS)  # the child's job
    args = parser.parse_args()
    if args.report:
        print_report(load(args.report))
        return
    args.out = args.out.resolve()
    if args.only_arm:
        arm, seed = args.only_arm, args.first_seed
        run = run_trl_arm if arm.startswith("trl") else run_rollgym_arm
        done = run(arm, seed, args, args.out / "warmstart")
        (args.out / f"seed-{seed}" / arm / "arm.json").write_text(json.dumps(arm_to_json(done)))
        return
    arms = args.arms.split(",")
    if unknown := sorted(set(arms) - set(ARMS)):
        parser.error(f"unknown arms {unknown}; choose from {','.join(ARMS)}")
    warm_dir = warm_start_dir(args)
    results = []
    for seed in range(args.first_seed, args.first_seed + args.runs):
        runs = [arm_in_child(arm, seed, args) for arm in arms]
        results.append(score(runs, seed, args, warm_dir))
        print("\n" + "\n".join(run_lines(*results[-1])), flush=True)
        save(results, args)
    print_report(results)


if __name__ == "__main__":
    main()
