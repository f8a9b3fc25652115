"""``summary.json``: what a ``rollgym run`` measured, in one file beside report.png."""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any

from rollgym.trainer.evaluate import SuccessRate

if TYPE_CHECKING:
    from rollgym.run.pipeline import RunConfig, RunReport


def _rate(value: SuccessRate | None) -> dict[str, float] | None:
    return None if value is None else {**dataclasses.asdict(value), "rate": value.rate}


@dataclasses.dataclass(frozen=True)
class HeldOut:
    """One env's held-out success: the warm start's, the last weights', the best point's
    (``None``: not evaluated)."""

    warm_start: SuccessRate | None = None
    final: SuccessRate | None = None
    best: SuccessRate | None = None


def write_summary(report: RunReport, config: RunConfig) -> None:
    """``report.summary_json``: the run's numbers, each env's part, and its config."""
    summary = {
        "wall_s": report.wall_s,
        "steps": report.train.steps,
        "policy_version": report.train.policy_version,
        "groups_trained": report.train.groups_trained,
        "dropped": report.train.dropped.model_dump(),
        "stage_shares": report.train.stage_shares,
        "turn_latency_s": {
            name: dict(zip(("p50", "p90", "p99"), cuts, strict=True))
            for name, cuts in report.train.turn_latency.items()
        },
        "success_rate": {
            "warm_start": _rate(report.warm_start),
            "rl": _rate(report.final),
            "best": _rate(report.best),
        },
        "online_eval": [
            {**point.model_dump(), "rate": point.rate} for point in report.train.online_eval
        ],
        "rollbacks": sum(point.rolled_back for point in report.train.online_eval),
        "shortened_steps": report.train.shortened_steps,
        "undone_steps": report.train.undone_steps,
        "alarms": {
            "bounds": config.trainer.alarms.model_dump(),
            "crossings": [
                {"step": step, "metric": metric, "value": value}
                for step, metric, value in report.alarm_crossings
            ],
            "per_step": [{"step": r.step, **r.alarms} for r in report.train.records],
        },
        "per_env": _per_env(report),
        "config": json.loads(config.model_dump_json()),
    }
    report.summary_json.write_text(json.dumps(summary, indent=2))


def _per_env(report: RunReport) -> dict[str, dict[str, Any]]:
    """Each env's part of the run: the episodes trained on, their mean reward and success
    (over all steps), and its held-out success of the warm start, after RL and at the best
    point (``None``: not evaluated)."""
    sums: dict[str, list[float]] = {}  # env -> [episodes, reward sum, successes]
    for record in report.train.records:
        for env, part in record.per_env.items():
            total = sums.setdefault(env, [0.0, 0.0, 0.0])
            total[0] += part.trajectories
            total[1] += part.reward_mean * part.trajectories
            total[2] += part.success_rate * part.trajectories
    envs = list(sums) + [env for env in report.per_env if env not in sums]
    out = {}
    for env in envs:
        episodes, rewards, successes = sums.get(env, [0.0, 0.0, 0.0])
        held_out = report.per_env.get(env, HeldOut())
        out[env] = {
            "trained_episodes": int(episodes),
            "reward_mean": rewards / episodes if episodes else None,
            "success_rate": successes / episodes if episodes else None,
            "held_out_warm_start": _rate(held_out.warm_start),
            "held_out_rl": _rate(held_out.final),
            "held_out_best": _rate(held_out.best),
        }
    return out
