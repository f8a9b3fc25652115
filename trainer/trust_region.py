"""A trust region by rejection: an optimizer step that moved the policy too far is undone.

With one optimizer step per sampled batch (``trainer.grpo``), PPO's clip has nothing to
act on (the "old" logprobs are the weights of the step itself), so the learning rate is
the only bound on how far one update moves the policy, and Adam can make one update far
larger than the others (docs/training.md, issue 12: KL 0.001 per step, then 0.58 in one
step, and the next batch won 0% of its episodes). ``StepTrustRegion`` measures each step
on its own batch: after ``optimizer.step()`` it recomputes the sampled tokens' logprobs
and estimates ``KL(before || after)`` (Schulman's k3, ``mean(r - 1 - log r)`` with
``r = exp(logp_after - logp_before)``). Above ``max_kl`` it restores the weights and the
optimizer's moments from before the step, as if the batch had not been drawn: PPO's
early stopping on a target KL (Spinning Up's ``target_kl``), for a single epoch.

Each step logs ``trust/step_kl`` and ``trust/step_rejected`` (1 or 0); the run counts the
rejections. A snapshot costs a copy of the trainable weights and the optimizer state per
step (for the 3.3M default model, 40 MB), and the check one forward pass over the batch.

    >>> import torch
    >>> before = torch.tensor([[-1.0, -2.0, 0.0]]); mask = torch.tensor([[1, 1, 0]])
    >>> step_kl(before, before, mask)
    0.0
    >>> round(step_kl(before, before - torch.tensor([[0.5, 0.5, 9.0]]), mask), 4)  # masked 9.0
    0.1065
"""

from __future__ import annotations

import copy
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
    """Undoes any optimizer step whose ``step_kl`` on its own batch exceeds ``max_kl``.

    The trainer calls ``before_step`` with the batch before its backward pass; the
    ``on_optimizer_step`` event (transformers' ``Trainer``, right after ``optimizer.step``)
    does the check. ``logps_of(model, batch)`` returns the batch's per-token logprobs under
    the model's current weights; the batch holds ``old_per_token_logps`` (the weights before
    the step) and a mask of the sampled tokens.
    """

    def __init__(self, max_kl: float, logps_of: LogpsOf, record: Callable[[str, float], None]):
        self.max_kl = max_kl
        self._logps_of = logps_of
        self._record = record
        self._batch: Batch | None = None
        self._weights: list[torch.Tensor] = []
        self._optimizer_state: dict[str, Any] | None = None
        self.rejected = 0

    def before_step(self, model: torch.nn.Module, optimizer: Any, batch: Batch) -> None:
        """Keeps the batch, the trainable weights and the optimizer's state."""
        self._batch = batch
        self._weights = [p.detach().clone() for p in _trainable(model)]
        self._optimizer_state = copy.deepcopy(optimizer.state_dict())

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        model, optimizer, batch = kwargs["model"], kwargs["optimizer"], self._batch
        if batch is None or self._optimizer_state is None:
            return control
        mask = batch["completion_mask"] * batch.get("tool_mask", 1)
        with torch.no_grad():
            after = self._logps_of(model, batch)
        kl = step_kl(batch["old_per_token_logps"], after, mask)
        rejected = kl > self.max_kl
        if rejected:
            with torch.no_grad():
                for param, saved in zip(_trainable(model), self._weights, strict=True):
                    param.copy_(saved)
            optimizer.load_state_dict(self._optimizer_state)
            self.rejected += 1
        self._record("trust/step_kl", kl)
        self._record("trust/step_rejected", float(rejected))
        self._batch, self._weights, self._optimizer_state = None, [], None
        return control


def _trainable(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]
