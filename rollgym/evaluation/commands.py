"""``rollgym eval``: held-out success of a model, and the precision red line.

rollgym eval --model DIR [--episodes 200] [--samples K] [--json]  in an engine of its own
rollgym eval --server URL [--model DIR] [--samples K] [--json]    through a running server
rollgym eval --model DIR --precision bfloat16 [--red-line 2]      both precisions, the verdict

Success per sample and pass@K (a seed solved by any of its K samples) on held-out seeds
(``trainer.evaluate.held_out_seeds``: disjoint from training's), unfiltered, with 95%
Wilson intervals; infrastructure failures are counted apart, never sampled again. With
``--server`` the server's current policy plays (``--model`` first pushes that directory's
weights: the server's version moves). Bad input (an unknown env, a missing model
directory, a server that does not answer or serves another model) is one line on stderr
and exit status 2.

The verdict goes to ``DIR/rollgym-precision.json`` (``--verdict`` elsewhere), where the
server looks before it serves below the training precision (docs/cost.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rollgym.contract import paths
from rollgym.contract.precision import VERDICT_FILE, PrecisionRun
from rollgym.run.demos import GUESS_ID

if TYPE_CHECKING:
    from rollgym.contract.wire import Trajectory
    from rollgym.evaluation.measure import HeldOutTask
    from rollgym.trainer.evaluate import Evaluation


def add_eval_commands(commands: argparse._SubParsersAction) -> None:
    evaluate = commands.add_parser(
        "eval", help="held-out success (and pass@k) of a model or a running server"
    )
    evaluate.add_argument("--model", help=f"model dir (default {paths.default_model_dir()})")
    evaluate.add_argument("--server", help="evaluate through this running server instead")
    evaluate.add_argument("--token", help="the server's admin token (default $ROLLGYM_ADMIN_TOKEN)")
    evaluate.add_argument("--env", default=GUESS_ID)
    evaluate.add_argument(
        "--env-kwargs",
        help="the env's kwargs as JSON (default: the guess preset's game on GuessNumber, "
        "none on another env)",
    )
    evaluate.add_argument("--episodes", type=int, default=200, help="held-out seeds")
    evaluate.add_argument("--samples", type=int, default=1, help="samples per seed (pass@k)")
    evaluate.add_argument("--max-turns", type=int, default=3)
    evaluate.add_argument("--max-tokens", type=int, default=8, help="per model turn")
    evaluate.add_argument("--temperature", type=float, default=1.0)
    evaluate.add_argument("--json", action="store_true", help="print the figures as JSON")
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


class EvalInputError(ValueError):
    """Input ``rollgym eval`` cannot work with; its message is the one line printed."""


def _eval(args: argparse.Namespace) -> int:
    from rollgym.server.errors import BadRequest

    try:
        return _evaluate(args)
    except (EvalInputError, BadRequest) as exc:  # BadRequest: the env refused its kwargs
        print(f"rollgym eval: {exc}", file=sys.stderr)
        return 2


def _env_kwargs(args: argparse.Namespace) -> dict[str, object]:
    """``--env-kwargs``, or the default env's game; another env's kwargs are its own."""
    from rollgym.run.task import TaskConfig

    if args.env_kwargs is None:  # the guess preset's game: the task table's own defaults
        return TaskConfig().env_kwargs if args.env == GUESS_ID else {}
    try:
        env_kwargs = json.loads(args.env_kwargs)
    except json.JSONDecodeError as exc:
        raise EvalInputError(f"--env-kwargs is not JSON: {exc}") from exc
    if not isinstance(env_kwargs, dict):
        raise EvalInputError("--env-kwargs must be a JSON object")
    return env_kwargs


def _task(args: argparse.Namespace) -> HeldOutTask:
    from rollgym.contract.wire import SamplingSettings
    from rollgym.evaluation.measure import HeldOutTask
    from rollgym.trainer.evaluate import held_out_seeds

    env_kwargs = _env_kwargs(args)
    if args.episodes < 1 or args.samples < 1:
        raise EvalInputError("--episodes and --samples must be at least 1")
    return HeldOutTask(
        env_id=args.env,
        env_kwargs=env_kwargs,
        seeds=held_out_seeds(args.episodes),
        max_turns=args.max_turns,
        sampling=SamplingSettings(temperature=args.temperature, max_tokens=args.max_tokens),
    )


def _evaluate(args: argparse.Namespace) -> int:
    task = _task(args)
    model_dir = Path(args.model) if args.model else None
    if model_dir is not None and not (model_dir / "config.json").is_file():
        raise EvalInputError(f"{model_dir} is not a model directory (no config.json)")
    if args.server:
        if args.precision:
            raise EvalInputError("--precision runs engines of its own: give --model, not --server")
        evaluation = _through_server(args, task, model_dir)
        where = args.server
    else:
        model_dir = model_dir or paths.default_model_dir()
        if not (model_dir / "config.json").is_file():
            raise EvalInputError(f"no model at {model_dir}: run `rollgym model init` or --model")
        _check_env(task.env_id)
        if args.precision:
            return _red_line(args, model_dir, task)
        evaluation = _in_engine(args, model_dir, task)
        where = str(model_dir)
    if args.json:
        print(json.dumps({"model": where, "env": task.env_id, **evaluation.summary()}))
        return 0
    print(f"{where} on {task.env_id}, {evaluation.seeds} held-out seeds x {evaluation.samples}:")
    print(f"  success per sample {evaluation.per_sample}")
    if evaluation.samples > 1:
        print(f"  pass@{evaluation.samples}          {evaluation.pass_at_k}")
    if evaluation.infra_failures:
        print(f"  {evaluation.infra_failures} infrastructure failures (not counted, not re-run)")
    return 0


def _engine_in_this_process() -> None:
    """vLLM's settings for an engine inside this process, as ``rollgym serve`` has them."""
    import os

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def _check_env(env_id: str) -> None:
    from rollgym.server.errors import NotFound
    from rollgym.server.rollout.environments import takes_pool

    try:
        takes_pool(env_id)
    except NotFound as exc:
        raise EvalInputError(str(exc)) from exc


def _in_engine(args: argparse.Namespace, model_dir: Path, task: HeldOutTask) -> Evaluation:
    import asyncio
    import dataclasses

    _engine_in_this_process()
    from rollgym.evaluation.measure import play
    from rollgym.trainer.evaluate import evaluation_of

    repeated = dataclasses.replace(task, seeds=[s for s in task.seeds for _ in range(args.samples)])
    episodes, _ = asyncio.run(play(model_dir, args.training_precision, repeated))
    groups: dict[int | None, list[Trajectory]] = {}
    for episode in episodes:
        groups.setdefault(episode.task_seed, []).append(episode)
    return evaluation_of(list(groups.values()), args.samples)


def _through_server(
    args: argparse.Namespace, task: HeldOutTask, model_dir: Path | None
) -> Evaluation:
    import os

    from rollgym.trainer.client import ServerClient
    from rollgym.trainer.config import ClientConfig
    from rollgym.trainer.errors import ServerReplyError, ServerUnavailable, TrainerError
    from rollgym.trainer.evaluate import evaluate_server
    from rollgym.trainer.weights import WeightPusher

    token = args.token or os.environ.get("ROLLGYM_ADMIN_TOKEN")
    config = ClientConfig(url=args.server, admin_token=token, reconnect_timeout_s=5.0)
    try:
        with ServerClient(config) as client:
            if model_dir is not None:
                from transformers import AutoModelForCausalLM
                from transformers.utils import logging as hf_logging

                hf_logging.disable_progress_bar()  # stderr keeps to the one line of an error
                model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
                WeightPusher.push_policy(client, model, retry=False)
            return evaluate_server(
                client,
                env_id=task.env_id,
                env_kwargs=task.env_kwargs,
                seeds=task.seeds,
                samples=args.samples,
                max_turns=task.max_turns,
                sampling=task.sampling,
            )
    except ServerUnavailable as exc:
        raise EvalInputError(f"the server at {args.server} does not answer: {exc}") from exc
    except ServerReplyError as exc:
        raise EvalInputError(f"the server at {args.server} refused: {exc}") from exc
    except TrainerError as exc:
        raise EvalInputError(str(exc)) from exc


def _red_line(args: argparse.Namespace, model_dir: Path, task: HeldOutTask) -> int:
    import asyncio

    _engine_in_this_process()
    from rollgym.evaluation.measure import compare_precisions

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
