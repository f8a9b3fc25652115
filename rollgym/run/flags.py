"""``rollgym run``'s flags: the common knobs of a run, each one field of ``RunConfig``.

A run's config is built in layers (``rollgym.run.presets``): the defaults, the preset, the
``--config`` file, then these flags. Three rules keep a changed task or model from inheriting
what belonged to the old one, unless the file or a flag names it again:

* a new env (``--env``, or ``task.env_id`` in the file) starts with no env kwargs and the
  task table's own defaults, not the preset's (the built-in task's ``digits``, boxes,
  tokens and temperature mean nothing to another env);
* a new env or model starts without the preset's warm start (its demonstrations play the
  preset's env and were chosen for the preset's model; a pulled or trained model starts
  as it is);
* a new env, mixture or model gets a run dir of its own (``runs/<envs>-<model>``), so it
  never resumes the preset's run.

The trainer's temperature is the task's (TRL recomputes the sampled tokens' logprobs at
it) unless the file names ``trainer.temperature``.

Several ``--env ID[@WEIGHT]`` make a mixture: the first is ``task.env_id``, the others
``task.mixture``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_args

from rollgym.contract import paths
from rollgym.trainer.config import Tracker
from rollgym.trainer.errors import TrainerConfigError

Values = dict[str, Any]

USAGE = """\
examples:
  rollgym run                                  the built-in run: SmolLM2 as an agent in Docker
                                               boxes (warm start, GRPO, report)
  rollgym run --env example/Reverse-v0 --model smollm2-135m-instruct --steps 20
                                               your registered env (entry point or
                                               "module:Env-v0") on a pulled model
  rollgym run --model ./my-model --lr 1e-5 --group-size 8 --max-tokens 64
  rollgym run --env rollgym/GuessNumber-v0@3 --env example/Reverse-v0@1
                                               a mixture: 3 groups of one to 1 of the other
  rollgym run --seed-pool 64 --curriculum     tasks that teach nothing come back less
  rollgym run --steps 20 --report-to tensorboard
                                               the series in TensorBoard too
  rollgym run --config my.json --steps 50      any RunConfig field in the file, flags win

A flag changes one field and keeps the rest of the preset; --config names any other field
(a partial file is layered over the preset: name only what you change). See
docs/training.md for every field.
"""


def add_run_flags(run: argparse.ArgumentParser) -> None:
    """The knobs a user turns most, by what they change."""
    task = run.add_argument_group("task")
    task.add_argument(
        "--env",
        metavar="ID[@WEIGHT]",
        action="append",
        type=_weighted_env,
        help='the environment: a registered id ("example/Reverse-v0") or "module:Env-v0"; '
        "give several for a mixture, each group playing one drawn by weight (default 1) "
        "(default: the preset's; a new env drops the preset's env kwargs and warm start)",
    )
    task.add_argument(
        "--env-kwargs",
        metavar="JSON",
        type=_json_table,
        help="the (first) env's kwargs, a JSON object; a mixture's others take theirs in "
        "--config's task.mixture",
    )
    task.add_argument(
        "--seed-pool", type=int, metavar="N", help="train on N task seeds, cycled (default: new)"
    )
    task.add_argument(
        "--curriculum",
        action="store_true",
        help="play less the tasks whose last 2 groups were all solved or all failed (each "
        "still 10%% of the time); needs --seed-pool",
    )
    task.add_argument("--max-turns", type=int, metavar="N", help="model turns per episode")
    task.add_argument("--max-tokens", type=int, metavar="N", help="tokens per model turn")
    task.add_argument(
        "--temperature", type=float, metavar="T", help="sampling temperature (trained at it too)"
    )
    task.add_argument(
        "--sandboxes", type=int, metavar="N", help="warm pool of boxes, for sandboxed envs"
    )
    model = run.add_argument_group("model")
    model.add_argument(
        "--model",
        metavar="NAME|DIR",
        help="a catalog name (rollgym model list; pulled if needed) or a model directory "
        "(default: the preset's; another model starts without the preset's warm start)",
    )
    model.add_argument(
        "--no-warm-start", action="store_true", help="no SFT first: RL from the model as it is"
    )
    grpo = run.add_argument_group("GRPO")
    grpo.add_argument("--steps", type=int, metavar="N", help="optimizer steps")
    grpo.add_argument("--group-size", type=int, metavar="N", help="episodes per task (a group)")
    grpo.add_argument("--groups-per-batch", type=int, metavar="N", help="groups per step")
    grpo.add_argument("--lr", type=float, metavar="LR", help="learning rate")
    grpo.add_argument(
        "--max-staleness",
        type=int,
        metavar="N",
        help="0: synchronous; >= 1: asynchronous (default 1)",
    )
    grpo.add_argument(
        "--report-to",
        action="append",
        choices=get_args(Tracker),
        metavar="TRACKER",
        help="also log TRL's and rollgym's per-step series to this tracker, kept under "
        "<run_dir>/grpo (tensorboard: runs/, wandb: wandb/ offline, mlflow: mlflow.db; "
        "trackio: its own $TRACKIO_DIR); repeatable, off by default",
    )
    grpo.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="every random source of training (demonstrations, GRPO, task seeds, sampling); "
        "evaluation seeds stay fixed",
    )


def flag_layer(args: argparse.Namespace) -> Values:
    """The fields the flags set (only those given)."""
    temperature = args.temperature
    (env_id, weight), *mixed = args.env or [(None, None)]
    layer: Values = {
        "run_dir": args.run_dir,
        "model_dir": None if args.model is None else str(model_dir(args.model)),
        "eval_episodes": args.eval_episodes,
        "server_url": args.server,
        "servers": args.servers,
        "seed": args.seed,
        "task": {
            "env_id": env_id,
            "weight": weight,
            "mixture": [_part(env, weight) for env, weight in mixed] or None,
            "env_kwargs": args.env_kwargs,
            "max_turns": args.max_turns,
            "max_tokens": args.max_tokens,
            "temperature": temperature,
            "sandboxes": args.sandboxes,
            "seed_pool": args.seed_pool,
            "curriculum": {} if args.curriculum else None,
        },
        "trainer": {
            "total_steps": args.steps,
            "max_staleness": args.max_staleness,
            "group_size": args.group_size,
            "groups_per_batch": args.groups_per_batch,
            "learning_rate": args.lr,
            "temperature": temperature,
            "report_to": args.report_to,
        },
    }
    for table in ("task", "trainer"):
        layer[table] = {k: v for k, v in layer[table].items() if v is not None}
    out = {k: v for k, v in layer.items() if v is not None and v != {}}
    if args.no_warm_start:
        out["warmstart"] = None
    return out


def preset_base(preset: str) -> Values:
    """``RunConfig``'s defaults under the preset: the base that the user's layers go over."""
    from rollgym.run.pipeline import RunConfig
    from rollgym.run.presets import PRESETS, merged

    return merged(json.loads(RunConfig().model_dump_json()), PRESETS[preset]())


def layered(base: Values, *user_layers: Mapping[str, Any]) -> Values:
    """``base`` (defaults and preset) under the user's layers, with the module's rules."""
    from rollgym.run.presets import merged

    user = merged(*user_layers)
    out = merged(base, user)
    user_task = user.get("task") or {}
    new_env = user_task.get("env_id", base["task"]["env_id"]) != base["task"]["env_id"]
    new_task = new_env or bool(user_task.get("mixture"))
    if new_env:  # the preset's task table (kwargs, boxes, tokens) was its env's
        from rollgym.run.task import TaskConfig

        defaults = TaskConfig().model_dump(mode="json")
        out["task"] = merged(defaults, {"env_kwargs": {}}, user_task)
    if "temperature" not in (user.get("trainer") or {}):  # trained as it is sampled
        out["trainer"] = {**out["trainer"], "temperature": out["task"]["temperature"]}
    new_model = str(user.get("model_dir", base["model_dir"])) != str(base["model_dir"])
    if (new_env or new_model) and "warmstart" not in user:
        out["warmstart"] = None
    if (new_task or new_model) and "run_dir" not in user:  # not the preset's run: not resumed
        out["run_dir"] = str(paths.runs_dir() / _run_name(out))
    return out


def _run_name(config: Values) -> str:
    """``example-Reverse-v0-smollm2-135m-instruct``: the envs and the model, as a folder."""
    task = config["task"]
    ids = [task["env_id"], *(part["env_id"] for part in task.get("mixture") or [])]
    envs = "+".join(env_id.rpartition(":")[2] for env_id in ids)
    return f"{envs}-{Path(config['model_dir']).name}".replace("/", "-")


def model_dir(name_or_dir: str) -> Path:
    """A catalog name's directory (``rollgym run`` pulls it), or a model directory."""
    from rollgym.models.catalog import CATALOG

    if name_or_dir in CATALOG:
        return paths.models_dir() / name_or_dir
    path = Path(name_or_dir).expanduser().resolve()
    if not (path / "config.json").is_file():
        raise TrainerConfigError(
            f"--model {name_or_dir}: not a catalog model ({', '.join(sorted(CATALOG))}) nor a "
            "model directory (one with config.json); pull one with `rollgym model pull`"
        )
    return path


def _part(env_id: str, weight: float | None) -> Values:
    return {"env_id": env_id} if weight is None else {"env_id": env_id, "weight": weight}


def _weighted_env(text: str) -> tuple[str, float | None]:
    """``ID`` or ``ID@WEIGHT`` (a positive number)."""
    env_id, at, weight = text.rpartition("@")
    if not at:
        return text, None
    try:
        value = float(weight)
    except ValueError:
        value = 0.0
    if not env_id or not value > 0:
        raise argparse.ArgumentTypeError(f"{text}: give ID or ID@WEIGHT, a weight above 0")
    return env_id, value


def _json_table(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError('a JSON object, like \'{"low": 1, "high": 8}\'')
    return value
