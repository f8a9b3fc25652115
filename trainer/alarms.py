"""Collapse alarms: how far the sampled batch is from the policy being trained.

Computed once per optimizer step from the tensors TRL's GRPO step already holds, on the
tokens the model sampled (``mask`` 1; environment tokens and padding are 0):

* ``kl_behaviour``: KL(behaviour || trainer) estimated on the sampled tokens,
  ``mean(r - 1 - log r)`` with ``r = exp(logp_trainer - logp_behaviour)`` (Schulman's k3:
  unbiased, never negative). ``0`` when the server sampled from the trainer's weights.
  It grows with staleness and with any mismatch between the engine and the trainer.
* ``is_ratio_p01/p50/p99/max``: percentiles of the untruncated importance ratio ``r``.
* ``is_truncated``: the share of tokens whose ratio exceeds the cap (their weight is cut).
* ``zero_variance_groups``: the share of groups whose valid rewards are all equal (no
  signal; the server drops them unless told not to).

``step_alarms`` gathers them, with TRL's own entropy, clip ratio and gradient norm, from a
step's logs; ``AlarmWatch`` holds them to ``AlarmBounds`` and words the warnings.

Example::

    >>> import torch
    >>> t = torch.tensor([[-1.0, -2.0]]); b = torch.tensor([[-1.0, -2.0]])
    >>> behaviour_stats(t, b, torch.ones(1, 2), cap=3.0)["kl_behaviour"]
    0.0
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch

from rollgym.trainer.config import AlarmBounds
from rollgym.trainer.progress import StepRecord

# Each alarm metric and the key TRL logs it under.
LOG_KEYS = {
    "kl_behaviour": "alarms/kl_behaviour",
    "entropy": "entropy",
    "clip_ratio": "clip_ratio/region_mean",
    "is_ratio_p01": "alarms/is_ratio_p01",
    "is_ratio_p50": "alarms/is_ratio_p50",
    "is_ratio_p99": "alarms/is_ratio_p99",
    "is_truncated": "alarms/is_truncated",
    "grad_norm": "grad_norm",
    "zero_variance_groups": "alarms/zero_variance_groups",
    "step_kl_full": "trust/step_kl_full",  # trainer.trust_region, when it is on
    "step_kl": "trust/step_kl",
    "step_scale": "trust/step_scale",
    "step_rejected": "trust/step_rejected",
}


def behaviour_stats(
    trainer_logps: torch.Tensor,
    behaviour_logps: torch.Tensor,
    mask: torch.Tensor,
    *,
    cap: float | None,
) -> dict[str, float]:
    """Alarm metrics over the tokens where ``mask`` is 1 (tensors of shape ``(B, T)``)."""
    keep = mask.bool() & torch.isfinite(behaviour_logps) & torch.isfinite(trainer_logps)
    log_ratio = (trainer_logps - behaviour_logps)[keep].double()
    if log_ratio.numel() == 0:
        return {}
    ratio = log_ratio.exp()
    quantiles = torch.quantile(ratio, ratio.new_tensor([0.01, 0.5, 0.99]))
    return {
        "kl_behaviour": float((ratio - 1 - log_ratio).mean()),
        "is_ratio_p01": float(quantiles[0]),
        "is_ratio_p50": float(quantiles[1]),
        "is_ratio_p99": float(quantiles[2]),
        "is_ratio_max": float(ratio.max()),
        "is_truncated": float((ratio > cap).double().mean()) if cap is not None else 0.0,
    }


def zero_variance_share(rewards: Sequence[float | None], group_size: int) -> float:
    """Share of groups (consecutive blocks of ``group_size``) whose non-None rewards are equal."""
    groups = [rewards[i : i + group_size] for i in range(0, len(rewards), group_size)]
    if not groups:
        return 0.0
    flat = 0
    for group in groups:
        valid = [r for r in group if r is not None and not math.isnan(r)]
        flat += len(valid) < 2 or max(valid) - min(valid) <= 1e-9
    return flat / len(groups)


def step_alarms(logs: Mapping[str, float]) -> dict[str, float]:
    """The alarm metrics present in one step's TRL logs, by their alarm names."""
    return {name: float(logs[key]) for name, key in LOG_KEYS.items() if key in logs}


class AlarmWatch:
    """Holds each step's metrics to ``bounds``; see the module docstring.

    >>> watch = AlarmWatch(AlarmBounds(max_kl_behaviour=0.02))
    >>> watch.check(7, {"kl_behaviour": 0.06})
    ['ALARM step 7: kl_behaviour 0.06 above 0.02']
    >>> watch.check(8, {"kl_behaviour": 0.07}), watch.crossings
    ([], [(7, 'kl_behaviour', 0.06)])
    """

    def __init__(self, bounds: AlarmBounds) -> None:
        self._bounds = [
            (name.removeprefix(side), side, bound)
            for name, bound in bounds.model_dump().items()
            if bound is not None
            for side in ("max_", "min_")
            if name.startswith(side)
        ]
        self._raised: set[str] = set()
        self.crossings: list[tuple[int, str, float]] = []  # (step, metric, value)

    def check(self, step: int, metrics: Mapping[str, float]) -> list[str]:
        """Warning lines for the metrics that crossed their bound at ``step``."""
        lines = []
        for metric, side, bound in self._bounds:
            if metric not in metrics:
                continue
            value = metrics[metric]
            out = value > bound if side == "max_" else value < bound
            if out and metric not in self._raised:
                where = "above" if side == "max_" else "below"
                lines.append(f"ALARM step {step}: {metric} {value:.3g} {where} {bound:.3g}")
                self.crossings.append((step, metric, value))
            self._raised = self._raised | {metric} if out else self._raised - {metric}
        return lines


def alarm_crossings(
    records: Sequence[StepRecord], bounds: AlarmBounds
) -> list[tuple[int, str, float]]:
    """Where a run's metrics crossed ``bounds``, as ``AlarmWatch`` saw them live: the
    records' alarms replayed in step order (the same across a resumed run's sessions)."""
    watch = AlarmWatch(bounds)
    for record in records:
        watch.check(record.step, record.alarms)
    return watch.crossings
