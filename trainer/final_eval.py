"""The held-out evaluation of the last weights, at the last step, so the trackers log it.

A run's held-out success after RL is the number its users compare; TRL's trackers close
their runs when training ends, so ``FinalEvaluation`` measures it inside training: once the
last step's weights reached the server, the rollout job stops (sampling is over), and the
served weights play the held-out seeds of each env. The rates go into the last step's
series (``rollgym/held_out/success_rate``: the first env's; ``rollgym/held_out/<env_id>/
success_rate``: each env's of a mixture) and back to the caller (``TrainResult.held_out``),
which does not evaluate those weights again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from rollgym.trainer.client import ServerClient
from rollgym.trainer.evaluate import SuccessRate
from rollgym.trainer.online_eval import EvalTask, evaluate_each


class FinalEvaluation(TrainerCallback):
    """Evaluates the served weights on ``seeds`` at the run's last step (register it after
    ``StepCallback``, which pushes); ``rates`` holds each env's success after."""

    def __init__(
        self,
        *,
        client: ServerClient,
        tasks: Sequence[EvalTask],
        seeds: Sequence[int],
        printer: Callable[[str], object] | None = print,
        settle: Callable[[], object] | None = None,
    ) -> None:
        """``settle`` waits for a push still in flight (``trainer.background_push``)."""
        self.client, self.tasks, self.seeds = client, list(tasks), list(seeds)
        self.printer, self.settle = printer, settle
        self.rates: dict[str, SuccessRate] = {}

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if state.global_step < state.max_steps:
            return
        if self.settle is not None:
            self.settle()
        self.client.stop_rollouts()
        if self.printer is not None:
            self.printer(f"  held-out evaluation of the last weights ({len(self.seeds)} seeds)")
        evaluations = evaluate_each(self.client, self.tasks, self.seeds, progress=self.printer)
        self.rates = {env: evaluation.per_sample for env, evaluation in evaluations.items()}
