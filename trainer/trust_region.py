"""A trust region by backtracking: an optimizer step that moved the policy too far is shortened.

With one optimizer step per sampled batch (``trainer.grpo``), PPO's clip has nothing to
act on (the "old" logprobs are the weights of the step itself), so the learning rate is
the only bound on how far one update moves the policy, and Adam can make one update far
larger than the others (docs/training.md, issue 12: KL 0.001 per step, then 0.58 in one
step, and the next batch won 0% of its episodes). ``StepTrustRegion`` measures each step
on its own batch: after ``optimizer.step()`` it recomputes the sampled tokens' logprobs
and estimates ``KL(before || after)`` (Schulman's k3, ``mean(r - 1 - log r)`` with
``r = exp(logp_after - logp_before)``). Above ``max_kl`` it shortens the step, as TRPO's
line search does: the weights go to ``before + a * (after - before)``, each try with
``a`` times ``0.9 * sqrt(max_kl / kl)`` of the last try's ``kl`` (KL grows about as the
square of a short step; a long one's saturates, hence the tries), at most half the last
``a``, up to 10 tries as TRPO's line search; a step that fits none is undone (the weights
from before). Ten, not three: a policy can sit where a few tokens' logprobs are steep in the
weights, and there a step's KL saturates (measured, issue 43: 0.17 for Adam's step and
still 0.12 for 1/40 of it, 0.012 at 1/200; through attention to the first tokens, which
moved the first guess's logprob from -2.6 to -7.0). Three tries undid every step there, 36
and 52 in a row in two runs that never moved again; the tries after the third cost a forward
pass each and run only where three would have undone the step.

The optimizer's state is kept either way: Adam's second moment must learn the larger
gradients that made the step too long, or every later step would be as long (undoing the
moments too made one run undo 79 of its 120 steps).

Each step logs ``trust/step_kl_full`` (the step as Adam made it), ``trust/step_kl`` (after
any shortening), ``trust/step_scale`` (``a``: 1 for a step that stood, 0 for one undone)
and ``trust/step_rejected`` (1 or 0). A check costs one forward pass over the batch (and
one more per try) and a copy of the trainable weights (for the 3.3M default model, 13 MB).

    >>> import torch
    >>> before = torch.tensor([[-1.0, -2.0, 0.0]]); mask = torch.tensor([[1, 1, 0]])
    >>> step_kl(before, before, mask)
    0.0
    >>> round(step_kl(before, before - torch.tensor([[0.5, 0.5, 9.0]]), mask), 4)  # masked 9.0
    0.1065
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from transformers import TrainerCallback

Batch = dict[str, Any]
LogpsOf = Callable[[torch.nn.Module, Batch], torch.Tensor]


def step_kl(before: torch.Tensor, after: torch.Tensor, mask: torch.Tensor) -> float:
    """KL(before || after) on the tokens where ``mask`` is 1, from their logprobs (k3)."""
    keep = mask.bool() & torch.isfinite(before) & torch.isfinite(after)
    log_ratio = (after - before)[keep].double()
    if log_ratio.numel() == 0:
        return 0.0
    return float((log_ratio.exp() - 1 - log_ratio).mean())


class StepTrustRegion(TrainerCallback):
    """Shortens or undoes any optimizer step whose ``step_kl`` on its batch exceeds ``max_kl``.

    The trainer calls ``before_step`` with the batch before its backward pass; the
    ``on_optimizer_step`` event (transformers' ``Trainer``, right after ``optimizer.step``)
    does the check. ``logps_of(model, batch)`` returns the batch's per-token logprobs under
    the model's current weights; the batch holds ``old_per_token_logps`` (the weights before
    the step) and a mask of the sampled tokens.
    """

    def __init__(
        self,
        max_kl: float,
        logps_of: LogpsOf,
        record: Callable[[str, float], None],
        *,
        tries: int = 10,
    ):
        self.max_kl = max_kl
        self.tries = tries
        self._logps_of = logps_of
        self._record = record
        self._batch: Batch | None = None
        self._weights: list[torch.Tensor] = []
        self.shortened = 0
        self.rejected = 0

    def before_step(self, model: torch.nn.Module, batch: Batch) -> None:
        """Keeps the batch and the trainable weights from before the step."""
        self._batch = batch
        self._weights = [p.detach().clone() for p in _trainable(model)]

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        model, batch = kwargs["model"], self._batch
        if batch is None:
            return control
        with torch.no_grad():
            full_kl = kl = self._kl(model, batch)
            scale = 1.0
            if kl > self.max_kl:
                after = [p.detach().clone() for p in _trainable(model)]
                for _ in range(self.tries):
                    scale *= min(0.5, 0.9 * math.sqrt(self.max_kl / kl))
                    self._move(model, after, scale)
                    kl = self._kl(model, batch)
                    if kl <= self.max_kl:
                        break
                else:
                    scale = 0.0
                    self._move(model, after, scale)
                    kl = 0.0
                self.shortened += scale > 0
                self.rejected += scale == 0
        self._record("trust/step_kl_full", full_kl)
        self._record("trust/step_kl", kl)
        self._record("trust/step_scale", scale)
        self._record("trust/step_rejected", float(scale == 0))
        self._batch, self._weights = None, []
        return control

    def _kl(self, model: torch.nn.Module, batch: Batch) -> float:
        mask = batch["completion_mask"] * batch.get("tool_mask", 1)
        return step_kl(batch["old_per_token_logps"], self._logps_of(model, batch), mask)

    def _move(self, model: torch.nn.Module, after: list[torch.Tensor], scale: float) -> None:
        """Sets the weights to ``before + scale * (after - before)``."""
        for param, before, end in zip(_trainable(model), self._weights, after, strict=True):
            param.copy_(before + scale * (end - before))


def _trainable(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]
