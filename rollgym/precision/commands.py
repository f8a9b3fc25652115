"""``rollgym eval``: held-out success of a model, and the precision red line.

rollgym eval --model DIR [--episodes 200]                         success at training precision
rollgym eval --model DIR --precision bfloat16 [--red-line 2]      both, and the verdict

The verdict goes to ``DIR/rollgym-precision.json`` (``--verdict`` elsewhere), where the
server looks before it serves below the training precision (docs/cost.md).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rollgym.contract import paths
from rollgym.contract.precision import VERDICT_FILE, PrecisionRun


def add_eval_commands(commands: argparse._SubParsersAction) -> None:
    evaluate = commands.add_parser(
        "eval", help="held-out success of a model; with --precision, the precision red line"
    )
    evaluate.add_argument("--model", help=f"model dir (default {paths.default_model_dir()})")
    evaluate.add_argument("--env", default="rollgym/GuessNumber-v0")
    evaluate.add_argument(
        "--env-kwargs", default='{"low": 1, "high": 8}', help="the env's kwargs as JSON"
    )
    evaluate.add_argument("--episodes", type=int, default=200, help="held-out seeds")
    evaluate.add_argument("--max-turns", type=int, default=3)
    evaluate.add_argument("--max-tokens", type=int, default=8, help="per model turn")
    evaluate.add_argument("--temperature", type=float, default=1.0)
    evaluate.add_argument(
        "--training-precision", default="float32", choices=("float32", "bfloat16", "float16")
    )
    evaluate.add_argument(
        "--precision", choices=("bfloat16", "float16", "fp8"), help="the lower precision to gate"
    )
    evaluate.add_argument("--red-line", type=float, default=2.0, help="points of success")
    evaluate.add_argument("--verdict", help=f"where to write it (default MODEL/{VERDICT_FILE})")
    evaluate.set_defaults(handler=_eval)


def _line(run: PrecisionRun) -> str:
    kl = (
        f", KL to training {run.kl_to_training:.2e}/token" if run.kl_to_training is not None else ""
    )
    return (
        f"  {run.precision:<9} success {100 * run.rate:5.1f}% ({run.successes}/{run.episodes}, "
        f"95% CI {100 * run.low:.1f}-{100 * run.high:.1f}%), {run.tokens_per_s:.0f} tok/s{kl}"
    )


def _eval(args: argparse.Namespace) -> int:
    import asyncio
    import os

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # as `rollgym serve`
    from rollgym.contract.wire import SamplingSettings
    from rollgym.precision.measure import HeldOutTask, compare_precisions, play, summarize
    from rollgym.trainer.evaluate import held_out_seeds

    model_dir = Path(args.model) if args.model else paths.default_model_dir()
    task = HeldOutTask(
        env_id=args.env,
        env_kwargs=json.loads(args.env_kwargs),
        seeds=held_out_seeds(args.episodes),
        max_turns=args.max_turns,
        sampling=SamplingSettings(temperature=args.temperature, max_tokens=args.max_tokens),
    )
    if args.precision is None:
        episodes, rate = asyncio.run(play(model_dir, args.training_precision, task))
        print(f"{model_dir} on {args.env}, {len(task.seeds)} held-out seeds:")
        print(_line(summarize(args.training_precision, episodes, rate)))
        return 0
    verdict = asyncio.run(
        compare_precisions(
            model_dir,
            task,
            training=args.training_precision,
            candidate=args.precision,
            red_line_points=args.red_line,
        )
    )
    print(f"{model_dir} on {args.env}, the same {len(task.seeds)} held-out seeds:")
    print(_line(verdict.training))
    print(_line(verdict.candidate))
    speedup = f"{verdict.speedup:.2f}x" if verdict.speedup else "-"
    print(
        f"  success drop {verdict.drop_points:+.1f} points (95% CI {verdict.drop_low:+.1f} to "
        f"{verdict.drop_high:+.1f}); red line {verdict.red_line_points} points; speed {speedup}"
    )
    target = Path(args.verdict) if args.verdict else model_dir / VERDICT_FILE
    target.write_text(verdict.model_dump_json(indent=2) + "\n")
    state = "ADMITTED" if verdict.admitted else "REFUSED"
    print(f"{state}: {args.precision} for these weights; verdict written to {target}")
    return 0 if verdict.admitted else 1
