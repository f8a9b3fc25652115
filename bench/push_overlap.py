"""Weight pushes: full vs LoRA, in the step vs in the background (issue 38, parts 1 and 3).

    .venv/bin/python -m bench.push_overlap [--model DIR] [--steps 12] [--runs 3]

One ``rollgym serve`` child on ``--model`` (default: the default model), the built-in
GuessNumber task, asynchronous GRPO (staleness 1); per run, each arm trains ``--steps``
steps from the same starting weights:

* ``full``        every weight trained, the push inside the step;
* ``full-bg``     the same, ``background_push``: the upload overlaps the next step;
* ``lora``        rank-16 adapters on attention and MLP (merged weights pushed);
* ``lora-bg``     the same, in the background.

Per arm the medians over its steps after the first (``steps.jsonl``'s fields): the step's
training (``train_s``), the push's upload + apply + canary (``push_s``), the time the step
blocked on pushing (``sync_s``: the whole push in the step; a background push's snapshot
and ``push_wait_s``), of it the wait for the previous push, the pushed bytes and the
canary's mismatch; each as ``a, b, c`` over the runs. The load average is printed: the
machine is shared, compare arms within a run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
from pathlib import Path

from bench import quiet_training_output

ARMS = {
    "full": {},
    "full-bg": {"background_push": True},
    "lora": {"lora": {"rank": 16}},
    "lora-bg": {"lora": {"rank": 16}, "background_push": True},
}
FIELDS = ("train_s", "push_s", "sync_s", "push_wait_s")


def _arm(name: str, root: Path, model: Path, client, steps: int) -> dict[str, float]:
    from bench.grpo_mode import train_timed
    from rollgym.run.pipeline import RunConfig
    from rollgym.trainer.config import TrainerConfig

    shutil.rmtree(root, ignore_errors=True)
    trainer = TrainerConfig(
        output_dir=root / "grpo",
        group_size=8,
        groups_per_batch=4,
        max_staleness=1,
        total_steps=steps,
        gradient_checkpointing=False,
        **ARMS[name],
    )
    run = RunConfig(run_dir=root, trainer=trainer, warmstart=None, eval_episodes=0)
    result = train_timed(run, client, model).result
    records = result.records[1:]  # the first step waits for the first batch
    row = {f: statistics.median(getattr(r, f) for r in records) for f in FIELDS}
    mismatches = [r.alarms.get("served_weights_mismatch", float("nan")) for r in records]
    row["mismatch"] = max(mismatches)
    return row


def main() -> None:
    quiet_training_output()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="model directory (default: the default model)")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--out", type=Path, default=Path(".data/bench-push-overlap"))
    args = parser.parse_args()
    from bench.grpo_mode import served
    from rollgym.contract import paths
    from rollgym.trainer.lora import LoraSettings  # noqa: F401  (peft imported before timing)

    model = (args.model or paths.default_model_dir()).resolve()
    out = args.out.resolve()
    arms = args.arms.split(",")
    rows: dict[str, list[dict[str, float]]] = {arm: [] for arm in arms}
    load = [os.getloadavg()[0]]
    with served(model, out / "server") as client:
        for run in range(args.runs):
            for arm in arms:
                rows[arm].append(_arm(arm, out / f"{arm}-{run}", model, client, args.steps))
                print(f"run {run + 1} {arm}: {rows[arm][-1]}", flush=True)
    load.append(os.getloadavg()[0])
    print(f"\n{model.name}, {args.steps} steps per arm, medians of steps 2-{args.steps}, ms")
    print(f"{'arm':<9}" + "".join(f"{f:>24}" for f in (*FIELDS, "mismatch")))
    for arm in arms:
        cells = [", ".join(f"{1e3 * r[f]:.0f}" for r in rows[arm]) for f in FIELDS] + [
            ", ".join(f"{r['mismatch']:.1e}" for r in rows[arm])
        ]
        print(f"{arm:<9}" + "".join(f"{c:>24}" for c in cells))
    print(f"load average (1 min) {load[0]:.1f} -> {load[1]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
