"""rollgym's own per-step series, for the experiment trackers beside TRL's metrics.

TRL logs the loss, rewards, entropy, clip and importance-sampling ratios (and, through
``ServerGRPOTrainer``, the behaviour-KL and IS-ratio alarms' metrics) to the trackers named
in ``report_to``. ``step_series`` adds what only rollgym knows, under ``rollgym/``; the
trainer merges it into the step's TRL log (``ServerGRPOTrainer.log``), so one log call
reaches every tracker and no second logger exists::

    rollgym/reward_mean, rollgym/success_rate       the step's batch
    rollgym/version_lag_mean, rollgym/version_lag_max
    rollgym/dropped/<reason>                        stale_server, stale_trainer, ... (run total)
    rollgym/stage/<stage>/busy_s, .../waiting_s     sampling, environment, buffer, training
    rollgym/latency/<part>_p50 (p90, p99)           model, environment, sandbox turns (s)
    rollgym/online_eval/success_rate                at the steps that evaluate
    rollgym/online_eval/<env_id>/success_rate       each env's, in a mixture
    rollgym/held_out/success_rate                   the last step: the last weights on the
    rollgym/held_out/<env_id>/success_rate          held-out seeds (trainer.final_eval); each
                                                    env's in a mixture
    rollgym/env/<env_id>/reward_mean, .../success_rate   each env's part of the batch
    rollgym/cost/<figure>                           the server's cost board after the previous
                                                    step's report (rollgym.contract.cost):
                                                    machine_s_per_trained_sample,
                                                    cost_per_trained_sample (priced servers),
                                                    generated_tokens_per_s, machine_s_per_1k_tokens

The names are TensorBoard tags as they are (TensorBoard groups on the first ``/``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rollgym.contract.cost import CostBoard
from rollgym.trainer.checkpoint import DropCounts
from rollgym.trainer.evaluate import SuccessRate
from rollgym.trainer.online_eval import OnlinePoint
from rollgym.trainer.progress import RunProgress

PREFIX = "rollgym/"


COST_FIGURES = (
    "machine_s_per_trained_sample",
    "cost_per_trained_sample",
    "generated_tokens_per_s",
    "machine_s_per_1k_tokens",
)


def step_series(
    progress: RunProgress,
    dropped: DropCounts,
    online: Sequence[OnlinePoint] = (),
    cost: CostBoard | None = None,
    held_out: Mapping[str, SuccessRate] | None = None,
) -> dict[str, float]:
    """The series at the step ``progress`` closed last (empty before the first)."""
    if not progress.steps:
        return {}
    record = progress.steps[-1]
    out: dict[str, float] = {
        "reward_mean": record.reward_mean,
        "success_rate": record.success_rate,
        "version_lag_mean": record.version_lag_mean,
        "version_lag_max": float(record.version_lag_max),
    }
    out.update({f"dropped/{reason}": float(n) for reason, n in dropped.model_dump().items()})
    for stage, share in progress.stage_shares().items():
        out[f"stage/{stage}/busy_s"] = share.busy_s
        out[f"stage/{stage}/waiting_s"] = share.waiting_s
    for part, cuts in progress.turn_latency().items():
        out.update(
            {f"latency/{part}_{q}": s for q, s in zip(("p50", "p90", "p99"), cuts, strict=True)}
        )
    for env, env_step in record.per_env.items():
        out[f"env/{env}/reward_mean"] = env_step.reward_mean
        out[f"env/{env}/success_rate"] = env_step.success_rate
    if online and online[-1].step == record.step:
        out["online_eval/success_rate"] = online[-1].rate
        for env, score in online[-1].per_env.items():
            out[f"online_eval/{env}/success_rate"] = score.rate
    if held_out:
        rates = list(held_out.items())
        out["held_out/success_rate"] = rates[0][1].rate  # the first env's: the run's headline
        if len(rates) > 1:
            out.update({f"held_out/{env}/success_rate": rate.rate for env, rate in rates})
    if cost is not None:  # a figure the board cannot tell yet (None) is left out
        figures = {name: getattr(cost, name) for name in COST_FIGURES}
        out.update({f"cost/{name}": value for name, value in figures.items() if value is not None})
    return {PREFIX + key: value for key, value in out.items()}
