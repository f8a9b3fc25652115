"""Named starting points for ``rollgym run --preset NAME``, and how config layers combine.

A run's config is built in layers, each overriding only the fields it names (nested tables
merge key by key): the built-in defaults (``RunConfig``), then the preset, then the
``--config`` file, then the command's flags. So ``{"trainer": {"seed": 1}}`` changes the
seed and keeps every other trainer field of the preset. ``task.env_kwargs`` and
``warmstart.demos`` are the exceptions: a layer that names one replaces it whole, since an
env's kwargs belong to that env (GuessNumber's ``strict`` and ``feedback`` must not leak
into another game or env), and a demonstrations table to its ``kind``.

* ``default``: the built-in run, the sandboxed tool task ``rollgym/Compute-v0`` (a python
  tool in Docker boxes from the server's warm pool, env latency measured per turn, the
  single-call kinds) on SmolLM2-135M-Instruct, after a short warm start of demonstrations,
  most of them answered at once without the tool (docs/training.md, "The built-in run").
  ``RunConfig``'s own field defaults are the ``guess`` preset's; this preset layers the tool
  task and the model over them.
* ``agent-tiny``: the same task on the 3.3M local model from random weights, after a warm
  start of generic copies, the task's copy drills and its demonstrations, half of them
  answered without the tool (the default until 2026-12-06; docs/training.md, "The tool
  task on the 3.3M model").
* ``guess``: GuessNumber 1..8 in 3 turns on the 3.3M local model, after an SFT warm start on
  its demonstrations: the first built-in run, no tool and no sandbox.
* ``smollm2``: SmolLM2-135M-Instruct (``rollgym model pull smollm2-135m-instruct``; the run
  pulls it if needed) on GuessNumber 1..6 in 3 turns, lenient, with range feedback, and no
  warm start: the pretrained model wins 18% of it as it is (docs/training.md has the
  measurements, and what RL makes of the game).
* ``agent-smollm2``: the default's recipe on the tool task's two-step kind (``scale``: read
  a number from a file in the box, then multiply it, copying the first call's output into
  the second; docs/training.md, "A real model on the two-step tool task").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rollgym.contract import paths
from rollgym.run.demos import COMPUTE_ID

Values = dict[str, Any]
_SMOLLM2 = "smollm2-135m-instruct"


def _agent_tiny() -> Values:
    return {
        "run_dir": str(paths.runs_dir() / "agent-tiny"),
        # a call and its answer fit 64 tokens; one box per episode a group batch plays
        # sampled (and so trained) at 0.7: at 1.0 one miscopied digit
        # in the call or the answer failed most episodes (docs/training.md, "The tool task")
        "task": {
            "env_id": COMPUTE_ID,
            "env_kwargs": {},
            "max_tokens": 64,
            "sandboxes": 32,
            "temperature": 0.7,
        },
        # copies, then drills, each at its own rate, then the conversations, half answered
        # without the tool (docs/training.md)
        "warmstart": {
            "demos": {
                "kind": "compute",
                "episodes": 1500,
                "direct_share": 0.5,
                "copies": 19_200,
                "drills": 6_400,
            },
            "epochs": 1.0,
            "learning_rate": 1e-3,
        },
    }


def _guess() -> Values:
    return {"run_dir": str(paths.runs_dir() / "guess")}


def _smollm2() -> Values:
    return {
        "model_dir": str(paths.models_dir() / _SMOLLM2),
        "run_dir": str(paths.runs_dir() / "smollm2"),
        "warmstart": None,
        # The candidate with a base rate in 10-60% (18% held out); strict parsing (3.5%),
        # 16 tokens (7%) and 1..8 (8%) leave too little for RL to start from.
        "task": {
            "max_tokens": 8,
            "temperature": 0.7,
            "env_kwargs": {"low": 1, "high": 6, "feedback": "range"},
        },
        # 12 steps fit the 45-minute budget on 2 cores; at lr 3e-5 a 10-step pilot went
        # from 18% to 58% held out.
        # An online evaluation at steps 6 and 12 keeps the best weights (every 20 never came).
        "trainer": {
            "learning_rate": 3e-5,
            "total_steps": 12,
            "temperature": 0.7,
            "online_eval": {"every": 6},
        },
    }


def _smollm2_agent(env_kwargs: Values, steps: int) -> Values:
    """SmolLM2 as an agent on the tool task: a short warm start, then ``steps`` of GRPO with
    an online evaluation halfway and at the end (it keeps the best weights)."""
    return {
        "model_dir": str(paths.models_dir() / _SMOLLM2),
        "task": {
            "env_id": COMPUTE_ID,
            "env_kwargs": env_kwargs,
            "max_tokens": 64,
            "max_turns": 3,
            "sandboxes": 16,
            "temperature": 0.7,
        },
        # The pretrained model never calls the tool. 20 steps of 8 demonstrations teach the
        # calls; four in five of them answer at once (a guess, always wrong), so the warm
        # start solves few (6 of 100 in a two-call pilot) and RL learns the tool's use. With
        # 240, half direct, the first batch already won 75%: groups all solved teach GRPO
        # nothing. ComputeDemos' defaults are this: 160 conversations, 0.8 direct, no copies.
        "warmstart": {
            "demos": {"kind": "compute"},
            "epochs": 1.0,
            "learning_rate": 5e-5,
            "batch_size": 8,
        },
        # groups of 8, 2 a step: a SmolLM2 step of 16 episodes trains in about 25 s, but
        # once most groups are solved a step waits for groups with a spread
        "trainer": {
            "learning_rate": 3e-5,
            "total_steps": steps,
            "temperature": 0.7,
            "group_size": 8,
            "groups_per_batch": 2,
            "online_eval": {"every": steps // 2},
        },
    }


def _default() -> Values:
    # the single-call kinds (add, mul, sum); 6 steps: in a 10-step pilot the online
    # evaluation had 90.6% at step 5, and steps 7-10 took 7.8 of its 11.5 minutes of GRPO
    return _smollm2_agent({}, steps=6)


def _agent_smollm2() -> Values:
    return {
        **_smollm2_agent({"kinds": ["scale"], "digits": 4}, steps=10),
        "run_dir": str(paths.runs_dir() / "agent-smollm2"),
    }


PRESETS: dict[str, Callable[[], Values]] = {
    "default": _default,
    "agent-smollm2": _agent_smollm2,
    "agent-tiny": _agent_tiny,
    "guess": _guess,
    "smollm2": _smollm2,
}


REPLACED_WHOLE = frozenset({"env_kwargs", "demos"})


def merged(*layers: Mapping[str, Any]) -> Values:
    """``layers`` combined, later ones winning; nested tables merge key by key, but for
    those named in ``REPLACED_WHOLE``, which the last layer that names them sets whole.

    >>> merged({"a": 1, "t": {"x": 1, "y": 2}}, {"t": {"y": 3}}, {"b": None})
    {'a': 1, 't': {'x': 1, 'y': 3}, 'b': None}
    >>> merged({"env_kwargs": {"high": 8, "strict": True}}, {"env_kwargs": {"high": 4}})
    {'env_kwargs': {'high': 4}}
    """
    out: Values = {}
    for layer in layers:
        for key, value in layer.items():
            mergeable = isinstance(value, Mapping) and isinstance(out.get(key), Mapping)
            if mergeable and key not in REPLACED_WHOLE:
                out[key] = merged(out[key], value)
            else:
                out[key] = dict(value) if isinstance(value, Mapping) else value
    return out
