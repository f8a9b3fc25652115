"""The end-of-run PNG: the reward curve and where the time went.

Left: mean episode reward and success rate per optimizer step (a moving average over the
noise; a mixture's success per env dotted), the online evaluations with their intervals (a guard's rollbacks as red dotted
lines), and the held-out success rates of the warm start and the RL policy if measured.
Middle: the collapse alarms per step (KL behaviour||trainer, entropy, grad norm, clip
ratio, the trust region's step KL), with a mark where a metric crossed its bound and a
grey one where the trust region undid a step. Right: the four stages' busy and
waiting seconds over the last session (``StageTimeline``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rollgym.trainer.evaluate import SuccessRate
from rollgym.trainer.loop import TrainResult
from rollgym.trainer.stages import STAGES


def moving_average(values: Sequence[float], window: int) -> list[float]:
    """Trailing mean over up to ``window`` values (same length as ``values``)."""
    out, total = [], 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def write_report_png(
    result: TrainResult,
    path: Path,
    warm_start: SuccessRate | None = None,
    final: SuccessRate | None = None,
    crossings: Sequence[tuple[int, str, float]] = (),
) -> Path:
    """Draw the report for ``result`` into ``path`` (PNG) and return it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (curve, alarms, stages) = plt.subplots(1, 3, figsize=(17, 4.5))
    steps = [r.step for r in result.records]
    window = max(1, len(steps) // 20)
    curve.plot(steps, [r.reward_mean for r in result.records], color="0.8", lw=0.8)
    curve.plot(
        steps, moving_average([r.reward_mean for r in result.records], window), label="reward"
    )
    success = [r.success_rate for r in result.records]
    curve.plot(steps, moving_average(success, window), label="success rate (training)")
    for env, (env_steps, env_success) in env_success_curves(result).items():
        label = f"success: {env}"
        curve.plot(env_steps, moving_average(env_success, window), ls=":", lw=1, label=label)
    for rate, label, color in ((warm_start, "warm start", "C3"), (final, "after RL", "C2")):
        if rate is not None:
            curve.axhline(rate.rate, ls="--", color=color, label=f"{label} (held out): {rate}")
            curve.axhspan(rate.low, rate.high, color=color, alpha=0.1)
    if points := result.online_eval:
        rates = [p.rate for p in points]
        # never below 0: a point written before wilson_interval held its rate at n of n
        errors = [
            [max(0.0, p.rate - p.low) for p in points],
            [max(0.0, p.high - p.rate) for p in points],
        ]
        steps_at = [p.step for p in points]
        curve.errorbar(steps_at, rates, yerr=errors, fmt="o", ms=3, color="C4", label="online eval")
        for point in points:
            if point.rolled_back:
                curve.axvline(point.step, color="red", ls=":", lw=1)
    curve.set(xlabel="optimizer step", ylabel="per batch", title="reward", ylim=(-0.05, 1.05))
    curve.legend(fontsize=7, loc="lower right")

    _draw_alarms(alarms, result, crossings)

    busy = [result.stage_shares[s][0] for s in STAGES]
    waiting = [result.stage_shares[s][1] for s in STAGES]
    stages.barh(STAGES, busy, label="busy", color="C0")
    stages.barh(STAGES, waiting, left=busy, label="waiting", color="0.85")
    stages.invert_yaxis()
    stages.set(xlabel="seconds (last session)", title="the loop's four stages")
    stages.legend(fontsize=8)
    stages.text(
        0.98, 0.02, turn_note(result), transform=stages.transAxes, ha="right", va="bottom",
        fontsize=8, family="monospace",
    )  # fmt: skip
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def env_success_curves(result: TrainResult) -> dict[str, tuple[list[int], list[float]]]:
    """A mixture's success rate per env: env -> (steps, rates) at the steps it played
    (empty for a run of one env, whose curve is the batch's)."""
    envs = sorted({env for record in result.records for env in record.per_env})
    if len(envs) < 2:
        return {}
    return {
        env: (
            [r.step for r in result.records if env in r.per_env],
            [r.per_env[env].success_rate for r in result.records if env in r.per_env],
        )
        for env in envs
    }


def turn_note(result: TrainResult) -> str:
    """The environment's share of the session and its turns' latency, in words."""
    busy, waiting = result.stage_shares.get("environment", (0.0, 0.0))
    lines = [f"environment busy {100 * busy / max(busy + waiting, 1e-9):.0f}% of the session"]
    for name, (p50, _, p99) in result.turn_latency.items():
        lines.append(f"{name} turn p50 {p50 * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms")
    return "\n".join(lines)


_ALARM_LINES = ("kl_behaviour", "entropy", "grad_norm", "clip_ratio", "step_kl")


def _draw_alarms(
    axes: Any, result: TrainResult, crossings: Sequence[tuple[int, str, float]]
) -> None:
    for i, metric in enumerate(_ALARM_LINES):
        points = [(r.step, r.alarms[metric]) for r in result.records if metric in r.alarms]
        if points:
            axes.plot(*zip(*points, strict=True), color=f"C{i}", lw=0.9, label=metric)
    for step, metric, value in crossings:
        axes.plot([step], [value], "x", color="red", ms=8)
        axes.annotate(metric, (step, value), fontsize=6, color="red")
    undone = [
        (r.step, r.alarms["step_kl"]) for r in result.records if r.alarms.get("step_rejected")
    ]
    for step, value in undone:
        axes.plot([step], [value], "o", color="grey", ms=4)
    title = f"collapse alarms ({len(crossings)} crossed, red x; {len(undone)} steps undone, o)"
    axes.set(xlabel="optimizer step", yscale="symlog", title=title)
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize=7, loc="upper left")
