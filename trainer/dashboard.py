"""Step reports to the server's live dashboard (``POST /admin/dashboard/trainer``).

The server draws the loop's four stages; three of them it sees itself, the training stage
only the trainer knows. After every optimizer step ``DashboardCallback`` posts the step's
``StepRecord`` and the training spans (compute, weight push, checkpoint) recorded since
its last report, as the dashboard's ``TrainerReport``; the answer's cost board (``cost``)
goes to the trackers with the next step's series. A server without the dashboard (404)
turns the reports off for the run, with one line said about it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from rollgym.contract.cost import CostBoard
from rollgym.contract.dashboard import TrainerReport
from rollgym.trainer.client import ServerClient
from rollgym.trainer.errors import ServerReplyError
from rollgym.trainer.progress import RunProgress


class DashboardCallback(TrainerCallback):
    """Posts one ``TrainerReport`` per optimizer step (register it after ``StepCallback``)."""

    def __init__(
        self,
        client: ServerClient,
        progress: RunProgress,
        *,
        printer: Callable[[str], object] | None = print,
    ) -> None:
        self.client = client
        self.progress = progress
        self.printer = printer
        self.enabled = True
        self._spans_sent = 0
        self._reported = -1
        self.cost: CostBoard | None = None  # the server's board after the last report

    def on_log(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        """After ``StepCallback.on_log`` has completed the step's record (alarms included)."""
        steps = self.progress.steps
        step = state.global_step
        if not self.enabled or not steps or steps[-1].step != step or self._reported == step:
            return  # no step closed since the last report (the run's closing summary)
        self._reported = step
        spans = self.progress.timeline.spans["training"][self._spans_sent :]
        # per_env is not drawn yet; filtered_groups are the server's own count to begin with
        step_numbers = self.progress.steps[-1].model_dump(exclude={"per_env", "filtered_groups"})
        report = TrainerReport(**step_numbers, busy_spans=spans)
        try:
            self.cost = self.client.report_step(report).cost
        except ServerReplyError as exc:
            if exc.status != 404:
                raise
            self.enabled = False
            if self.printer is not None:
                self.printer("  (the server has no dashboard: step reports are off)")
            return
        self._spans_sent += len(spans)
