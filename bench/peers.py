"""rollgym against TRL alone: the same GRPO run three ways, one table (issue 19, part 1).

    .venv/bin/python -m bench.peers [--steps 30] [--eval-episodes 200]
                                    [--arms trl,trl-cb,sync,async-1,async-2] [--out DIR]
                                    [--max-step-kl KL] [--unpinned]

Every figure rollgym publishes elsewhere compares it with itself; a user choosing a tool
compares it with what they would use instead. So one task, one model, one warm start, the
same optimizer steps, group size (8), batch (4 groups), learning rate and loss (TRL's
GRPO with rollgym's settings, ``trainer.grpo.grpo_args``), run three ways:

* ``trl``, ``trl-cb``  **TRL alone**, written as TRL 1.16's documentation shows
                       (``bench.peers_trl``): ``GRPOTrainer(environment_factory=...)``,
                       generation by transformers in the trainer's process (``trl-cb``
                       with transformers' continuous batching, its cache bounded), and the
                       sandboxed tool driven through one ``docker exec`` per call into a
                       hardened container per rollout, as per-exec sandbox clients do.
                       Sampling, the environment and training take turns.
* ``sync``             **rollgym, synchronous** (``max_staleness=0``): the rollout server
                       (vLLM in its own process) plays the batch's episodes concurrently,
                       each guess through the in-box executor (no ``docker exec``), while
                       the trainer waits; then the trainer trains and pushes the weights.
* ``async-k``          **rollgym, asynchronous** (``max_staleness=k``): the server samples
                       the next batches while the trainer trains on this one, each on
                       its own cores (``CpuSplit(pinned=True)``: the server and its engine
                       one core, the trainer the rest; ``--unpinned``: both on all).

The task is ``rollgym/GuessTool-v0``: GuessNumber 1..8 in 3 turns with range feedback
("Higher. From 5 to 8."), each guess a call of the tool ``guess(number)`` whose verdict a
small program computes in the sandbox (``envs.guess_verdict``); the host keeps the target
and the reward (GuessNumber's rule: ``1 - 0.05 * (turns - 1)`` when found, ``-0.1`` per
rejected guess). It is a task the default 3.3M model can learn, with a sandboxed tool on
every step. The warm start, computed once, is the built-in run's SFT on the built-in
demonstrations, each turned into tool calls (``envs.guess_tool.as_tool_play``) and laid
out by the server's ``ChatCodec``: TRL renders the same prompt and the same tool replies
token for token (a unit test checks both), so all arms start from the same policy.

Columns: policy updates per minute and model tokens of the trained batches per second
(both from the first step's end to the last, so start-up and the first batch are left
out); the environment's busy share of the run's wall time; held-out success of each
arm's final weights with its 95% Wilson interval, all measured the same way (the rollout
server playing the same held-out seeds, ``trainer.evaluate``); peak resident memory of the
trainer and server processes (containers not counted). Each arm runs in a fresh child
process. Target: the best rollgym asynchronous arm at >= 3x the faster TRL arm's updates
per minute, with held-out success inside TRL's interval or above.

Where the arms cannot be the same (each named where it is set): TRL's loop ends a rollout
when the model answers without a call or after ``max_tool_calling_iterations`` (3) calls,
so a rollout that did not win samples a fourth reply that is never run, and its token
budget is one for the whole rollout (``MAX_COMPLETION``), where rollgym caps each turn
(``MAX_TOKENS``) and ends the episode at the turn limit; a reply without a well-formed call
ends a TRL rollout, while rollgym's env rejects it with feedback and a penalty and the
episode goes on. TRL samples on the policy it trains (no behaviour-logprob correction
needed, none applied), rollgym corrects for the engine's sampling (``grpo.py``). rollgym
checkpoints every step (its acknowledgements need it); TRL here never. rollgym's sandbox
pool holds ``(staleness + 1) x batch`` boxes, TRL makes one container per rollout of a
batch (32). rollgym's arms train with its trust region (``--max-step-kl``, the built-in run's
0.02: ``trainer.trust_region``, one forward pass more per step), a guard TRL alone has no
counterpart for; ``--max-step-kl 0`` turns it off (without it, asynchronous arms collapsed in
two of four full runs' arms: docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import quiet_training_output

ENV_ID = "rollgym/GuessTool-v0"
LOW, HIGH, MAX_TURNS = 1, 8, 3
GROUP_SIZE, GROUPS_PER_BATCH = 8, 4
BATCH = GROUP_SIZE * GROUPS_PER_BATCH
MAX_TOKENS = 32  # per model turn: a guess call is 24 tokens, then the end of the turn
TOOL_REPLY_TOKENS = 32  # a verdict between two turns, with the chat template's markup
MAX_COMPLETION = MAX_TURNS * (MAX_TOKENS + TOOL_REPLY_TOKENS) + MAX_TOKENS  # TRL: a rollout
TARGET = 3.0
ARMS = ("trl", "trl-cb", "sync", "async-1", "async-2")


@dataclasses.dataclass(frozen=True)
class Row:
    """One arm's figures; ``error`` says why an arm that failed has none."""

    arm: str
    steps: int = 0
    updates_per_min: float = float("nan")
    tokens_per_s: float = float("nan")
    env_share: float = float("nan")
    peak_mib: float = float("nan")
    wall_s: float = float("nan")
    load: tuple[float, float] = (float("nan"), float("nan"))
    final_dir: str | None = None
    success: Any = None  # rollgym.trainer.evaluate.SuccessRate, once evaluated
    error: str | None = None

    @property
    def is_trl(self) -> bool:
        return self.arm.startswith("trl")


def staleness_of(arm: str) -> int:
    """``sync`` -> 0, ``async-k`` -> k."""
    return 0 if arm == "sync" else int(arm.removeprefix("async-"))


# --- the shared set-up ---------------------------------------------------------------------


def trainer_config(
    args: argparse.Namespace, root: Path, staleness: int = 0, max_step_kl: float | None = None
) -> Any:
    from rollgym.trainer.config import TrainerConfig

    return TrainerConfig(
        max_step_kl=max_step_kl,
        output_dir=root / "grpo",
        group_size=GROUP_SIZE,
        groups_per_batch=GROUPS_PER_BATCH,
        max_staleness=staleness,
        total_steps=args.steps,
        learning_rate=args.lr,
        gradient_checkpointing=False,  # a 3.3M model: recomputing costs time, saves nothing
    )


def task_config() -> Any:
    from rollgym.run.task import TaskConfig

    return TaskConfig(
        env_id=ENV_ID,
        env_kwargs={"low": LOW, "high": HIGH},
        max_turns=MAX_TURNS,
        max_tokens=MAX_TOKENS,
    )


def tool_warm_start(out: Path) -> Path:
    """The built-in warm start's demonstrations played through the tool, SFT'd once."""
    from rollgym.contract import paths
    from rollgym.contract.chat import chat_record, template_messages
    from rollgym.envs.guess_tool import GUESS_TOOL, as_tool_play
    from rollgym.run.demos import GuessDemos
    from rollgym.run.warmstart import WarmStartConfig, demonstration_records, warm_start

    built_in = WarmStartConfig()
    game = built_in.demos
    assert isinstance(game, GuessDemos)
    demos = out / "demonstrations.jsonl"
    out.mkdir(parents=True, exist_ok=True)
    with demos.open("w") as handle:
        for record in demonstration_records(built_in):
            played = as_tool_play(template_messages(record), game.low, game.high)
            handle.write(chat_record(played, tools=[GUESS_TOOL.to_openai()]).to_json() + "\n")
    none = game.model_copy(
        update={
            "oracle_episodes": 0,
            "imperfect_episodes": 0,
            "drill_episodes": 0,
            "endgame_episodes": 0,
        }
    )
    config = built_in.model_copy(update={"demos": none, "demonstrations": demos})
    return warm_start(config, paths.default_model_dir(), out / "warmstart", printer=print)


def pool_settings(boxes: int) -> dict[str, str]:
    return {"ROLLGYM_SANDBOXES__POOL_SIZE": str(boxes)}


def cpu_split(staleness: int, *, pinned: bool) -> Any:
    """Synchronous: ``rollgym run``'s split (trainer and server take turns, the trainer on
    every core). Asynchronous: both busy at once, so each on its own cores (the server one,
    the trainer the rest) unless ``pinned`` is off."""
    from rollgym.run.pipeline import CpuSplit

    if staleness == 0 or not pinned:
        return CpuSplit()
    cores = os.cpu_count() or 2
    return CpuSplit(server=1, trainer=max(cores - 1, 1), pinned=cores > 1)


# --- the arms, each in a child process -----------------------------------------------------


def run_rollgym_arm(arm: str, args: argparse.Namespace, warm_dir: Path) -> Row:
    from bench.grpo_mode import served, tokens_per_s, train_timed
    from bench.memory import PeakRss
    from rollgym.run.pipeline import RunConfig, final_weights

    root = args.out / arm
    staleness = staleness_of(arm)
    run = RunConfig(
        run_dir=root,
        task=task_config(),
        trainer=trainer_config(args, root, staleness, args.max_step_kl or None),
        warmstart=None,
        eval_episodes=0,
    )
    pool = pool_settings((staleness + 1) * BATCH)
    threads = cpu_split(staleness, pinned=not args.unpinned)
    with PeakRss() as peak, served(warm_dir, root / "server", pool, threads) as client:
        timed = train_timed(run, client, warm_dir)
    busy, waiting = timed.result.stage_shares["environment"]
    return Row(
        arm=arm,
        steps=timed.result.steps,
        updates_per_min=timed.updates_per_min,
        tokens_per_s=tokens_per_s(timed.step_ends, timed.result.trl_logs, BATCH),
        env_share=busy / max(busy + waiting, 1e-9),
        peak_mib=peak.mib,
        wall_s=timed.wall_s,
        load=timed.load,
        final_dir=str(final_weights(run)),
    )


def run_trl_arm(arm: str, args: argparse.Namespace, warm_dir: Path) -> Row:
    import torch

    from bench.grpo_mode import steps_per_min, tokens_per_s
    from bench.memory import PeakRss
    from bench.peers_trl import ExecBoxes, GuessGame, train_trl
    from rollgym.envs.guess_tool import opening
    from rollgym.envs.programs import Meter

    torch.set_num_threads(os.cpu_count() or 1)  # one process: generation and training
    root = args.out / arm
    prompts = [
        {"prompt": list(opening(LOW, HIGH)), "seed": seed}
        for seed in range(args.steps * GROUPS_PER_BATCH)
    ]  # the training task seeds of rollgym's rollout job: 0, 1, 2, ...
    meter = Meter()
    load_before = os.getloadavg()[0]
    with ExecBoxes() as boxes, PeakRss() as peak:
        run = train_trl(
            trainer_config(args, root),
            warm_dir,
            lambda: GuessGame(boxes.start(), meter, low=LOW, high=HIGH, max_guesses=MAX_TURNS),
            prompts,
            max_completion_length=MAX_COMPLETION,
            max_turns=MAX_TURNS,
            continuous_batching=arm == "trl-cb",
            meter=meter,
            final_dir=root / "final",
        )
    return Row(
        arm=arm,
        steps=len(run.step_ends),
        updates_per_min=steps_per_min(run.step_ends),
        tokens_per_s=tokens_per_s(run.step_ends, run.trl_logs, BATCH),
        env_share=run.env_s / run.wall_s,
        peak_mib=peak.mib,
        wall_s=run.wall_s,
        load=(load_before, os.getloadavg()[0]),
        final_dir=str(root / "final"),
    )


def arm_in_child(arm: str, args: argparse.Namespace) -> Row:
    """Run ``arm`` in a fresh interpreter (its memory its own); its row, or why it failed."""
    root = args.out / arm
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    command = [
        sys.executable, "-m", "bench.peers", "--only-arm", arm,
        "--steps", str(args.steps), "--lr", str(args.lr), "--out", str(args.out),
        "--max-step-kl", str(args.max_step_kl), *(["--unpinned"] if args.unpinned else []),
    ]  # fmt: skip
    with (root / "arm.log").open("wb") as log:
        code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
    result = root / "arm.json"
    if code == 0 and result.is_file():
        values = json.loads(result.read_text())
        return Row(**{**values, "load": tuple(values["load"])})
    lines = (root / "arm.log").read_text(errors="replace").strip().splitlines()
    return Row(arm=arm, error=f"exit code {code}: {lines[-1] if lines else 'no output'}")


def evaluate(rows: list[Row], warm_dir: Path, args: argparse.Namespace) -> tuple[Any, list[Row]]:
    """Held-out success of the warm start and of every arm's final weights, on one server."""
    from bench.grpo_mode import served
    from rollgym.contract.wire import SamplingSettings
    from rollgym.trainer.evaluate import evaluate_weights, held_out_seeds

    def success(client: Any, model_dir: Path) -> Any:
        return evaluate_weights(
            client,
            model_dir,
            env_id=ENV_ID,
            env_kwargs={"low": LOW, "high": HIGH},
            seeds=held_out_seeds(args.eval_episodes),
            max_turns=MAX_TURNS,
            sampling=SamplingSettings(temperature=1.0, max_tokens=MAX_TOKENS),
        )

    with served(warm_dir, args.out / "eval-server", pool_settings(BATCH)) as client:
        warm = success(client, warm_dir)
        rated = [
            dataclasses.replace(row, success=success(client, Path(row.final_dir)))
            if row.final_dir
            else row
            for row in rows
        ]
    return warm, rated


# --- the table -------------------------------------------------------------------------


def verdict_lines(rows: Sequence[Row]) -> list[str]:
    """The target's verdict: the best rollgym async arm against the faster TRL arm."""
    trl = [r for r in rows if r.is_trl and r.error is None]
    asyncs = [r for r in rows if r.arm.startswith("async") and r.error is None]
    if not trl or not asyncs:
        return ["no verdict: it needs a TRL arm and an asynchronous rollgym arm that ran"]
    base = max(trl, key=lambda r: r.updates_per_min)
    best = max(asyncs, key=lambda r: r.updates_per_min)
    speedup = best.updates_per_min / base.updates_per_min
    lines = [f"best asynchronous rollgym arm: {best.arm}, {speedup:.2f}x {base.arm}"]
    lines.append(f"  {'met' if speedup >= TARGET else 'NOT MET':<8}>= {TARGET:g}x TRL alone")
    if best.success is None or base.success is None:
        lines.append("  unknown  success: not evaluated")
    else:
        held = best.success.rate >= base.success.low
        lines.append(
            f"  {'met' if held else 'NOT MET':<8}its held-out success "
            f"{100 * best.success.rate:.1f}% inside {base.arm}'s 95% CI "
            f"({100 * base.success.low:.1f}-{100 * base.success.high:.1f}%) or above"
        )
    return lines


def table_lines(rows: Sequence[Row], warm: Any, args: argparse.Namespace) -> list[str]:
    ran = [r for r in rows if r.is_trl and r.error is None]
    base = ran[0] if ran else Row(arm="trl")  # the first TRL arm that ran
    lines = [
        f"GRPO on {ENV_ID} ({LOW}..{HIGH}, {MAX_TURNS} turns), {args.steps} steps per arm, "
        f"batch {GROUPS_PER_BATCH} groups x {GROUP_SIZE}, lr {args.lr:g}"
        + (f", rollgym's trust region {args.max_step_kl:g}" if args.max_step_kl else ""),
        f"{'arm':<9}{'updates/min':>12}{'vs ' + base.arm:>10}{'tokens/s':>10}{'env share':>10}"
        f"{'peak MiB':>10}{'wall s':>8}  held-out success (95% CI)",
    ]
    for row in rows:
        if row.error is not None:
            lines.append(f"{row.arm:<9}failed: {row.error}")
            continue
        lines.append(
            f"{row.arm:<9}{row.updates_per_min:>12.2f}"
            f"{row.updates_per_min / base.updates_per_min:>9.2f}x"
            f"{row.tokens_per_s:>10.0f}{100 * row.env_share:>9.0f}%{row.peak_mib:>10.0f}"
            f"{row.wall_s:>8.0f}  {row.success if row.success is not None else 'not evaluated'}"
        )
    lines.append(f"warm start (before RL): {warm}")
    return lines


def print_report(rows: Sequence[Row], warm: Any, args: argparse.Namespace) -> None:
    print("\n" + "\n".join(table_lines(rows, warm, args)))
    print("\n" + "\n".join(verdict_lines(rows)))
    loads = ", ".join(f"{r.arm} {r.load[0]:.1f}->{r.load[1]:.1f}" for r in rows if not r.error)
    print(f"\nload average (1 min) before->after each arm: {loads}; now {os.getloadavg()[0]:.1f}")
    print(f"on {os.cpu_count()} cores")


def main() -> None:
    quiet_training_output()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--eval-episodes", type=int, default=200)
    parser.add_argument("--arms", default=",".join(ARMS), help=f"a subset of {','.join(ARMS)}")
    # bench.trainer's rate: over 30 steps 2e-4 sometimes collapses a run (docs/training.md)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--out", type=Path, default=Path(".data/bench-peers"))
    parser.add_argument(
        "--max-step-kl",
        type=float,
        default=0.02,
        help="rollgym's trust region on its arms (the built-in run's; TRL has none); 0: off",
    )
    parser.add_argument(
        "--unpinned",
        action="store_true",
        help="asynchronous arms: trainer and server on all cores, not each on its own",
    )
    parser.add_argument("--only-arm", choices=ARMS, help=argparse.SUPPRESS)  # the child's job
    args = parser.parse_args()
    args.out = args.out.resolve()
    if args.only_arm:
        run = run_trl_arm if args.only_arm.startswith("trl") else run_rollgym_arm
        row = run(args.only_arm, args, args.out / "warmstart")
        (args.out / args.only_arm / "arm.json").write_text(json.dumps(dataclasses.asdict(row)))
        return
    arms = args.arms.split(",")
    if unknown := sorted(set(arms) - set(ARMS)):
        parser.error(f"unknown arms {unknown}; choose from {','.join(ARMS)}")
    warm_dir = tool_warm_start(args.out)
    rows = [arm_in_child(arm, args) for arm in arms]
    warm, rows = evaluate(rows, warm_dir, args)
    print_report(rows, warm, args)
    results = {
        "args": {k: str(v) for k, v in vars(args).items()},
        "warm_start": str(warm),
        "arms": [{**dataclasses.asdict(r), "success_text": str(r.success)} for r in rows],
        "verdict": verdict_lines(rows),
    }
    (args.out / "results.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
