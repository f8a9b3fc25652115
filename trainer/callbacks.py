"""The trainer's duties around TRL's optimizer steps, as ``transformers`` callbacks.

* ``StepCallback``: at train begin, push the starting (or resumed) weights unless the
  server already serves them (``push_at_start``), so the server samples from exactly the
  trainer's weights, then let the caller start sampling; after
  every optimizer step, in this order: account the compute time, push weights (every
  ``push_every`` steps and at the last) and act on the server's canary verdict
  (``trainer.canary``), close the step's progress record, print the table.
* ``CheckpointLedgerCallback``: after TRL saved a checkpoint, write the data position and
  policy version into it, then ack the groups it covers (see ``trainer.checkpoint``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from rollgym.trainer.alarms import AlarmWatch, step_alarms
from rollgym.trainer.background_push import BackgroundPush
from rollgym.trainer.checkpoint import write_state
from rollgym.trainer.client import ServerClient
from rollgym.trainer.config import TrainerConfig
from rollgym.trainer.errors import ServedWeightsMismatch
from rollgym.trainer.feed import GroupFeed
from rollgym.trainer.ledger import DataLedger
from rollgym.trainer.progress import RunProgress, StepLog
from rollgym.trainer.weights import WeightPusher, WeightSync


class StepCallback(TrainerCallback):
    """Weight pushes and progress around each optimizer step (see the module docstring)."""

    def __init__(
        self,
        *,
        config: TrainerConfig,
        feed: GroupFeed,
        pusher: WeightPusher,
        progress: RunProgress,
        step_log: StepLog,
        on_ready: Callable[[], object] | None = None,
        printer: Callable[[str], object] | None = print,
        push_at_start: bool = True,
        background: BackgroundPush | None = None,
    ) -> None:
        self.config = config
        self.background = background
        if background is not None:
            background.on_landed = self._on_sync
        self.push_at_start = push_at_start
        self.feed = feed
        self.pusher = pusher
        self.progress = progress
        self.step_log = step_log
        self.on_ready = on_ready
        self.printer = printer
        self.alarms = AlarmWatch(config.alarms)
        self._canary_alarm: dict[str, float] = {}  # the last push's, for the step's record
        self._unchecked = False  # said once that the server checks no canary

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self.push_at_start:
            self._push(kw["model"])
        if self.on_ready is not None:
            self.on_ready()
        self.feed.ready_at = time.time()

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self.progress.on_busy(self.feed.ready_at, time.time(), kind="train")
        step = state.global_step
        if step % self.config.push_every == 0 or step >= state.max_steps:
            if self.background is not None:
                started = time.time()
                self.background.submit(kw["model"])
                self.progress.on_busy(started, time.time(), kind="sync")
                self.progress.on_push(waited_s=self.background.waited_s)
            else:
                self._push(kw["model"])
        version = self.background.trainer_version if self.background else self.pusher.version
        self.progress.end_step(
            step=step,
            policy_version=version,
            dropped_total=self.feed.ledger.dropped.total,
            filtered_groups=self.feed.filtered_groups(),
        )

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self.background is not None:
            self.background.wait()

    def on_log(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        """TRL logs a step's metrics after the step ends: the step's record is complete
        only now, so it is written, shown and held to the alarm bounds here."""
        logs = {k: v for k, v in (kw.get("logs") or {}).items() if isinstance(v, int | float)}
        self.progress.on_trl_logs(logs)
        steps = self.progress.steps
        if "loss" not in logs or not steps or steps[-1].step != state.global_step:
            return  # not a step's log (the run's closing summary)
        record = self.progress.add_alarms({**step_alarms(logs), **self._canary_alarm})
        self.step_log.append(record)
        if self.printer is not None:
            self.printer(self.progress.render(total_steps=state.max_steps))
            for line in self.alarms.check(record.step, record.alarms):
                self.printer(line)
            if record.alarms.get("step_scale", 1.0) < 1.0:
                self.printer(_trust_region_line(record.step, record.alarms, self.config))

    def _push(self, model: Any) -> None:
        started = time.time()
        sync = self.pusher.push(model)
        self.progress.on_busy(started, time.time(), kind="sync")
        self._on_sync(sync)

    def _on_sync(self, sync: WeightSync) -> None:
        """Count a landed push's time; act on its canary verdict (``trainer.canary``)."""
        self.progress.on_push(landed_s=sync.sync_s)
        canary = sync.server.canary if sync.server is not None else None
        if canary is None:
            if sync.server is not None and self.config.canary is not None and not self._unchecked:
                self._unchecked = True
                self._say(
                    "  (the server answers no canary verdict, e.g. a cluster's router: what it "
                    "serves after a push is not checked)"
                )
            return
        self._canary_alarm = {"served_weights_mismatch": canary.mismatch}
        if canary.passed:
            return
        line = (
            f"SERVED WEIGHTS MISMATCH at version {canary.policy_version}: the server's logprobs "
            f"of the canary's probes differ from the trainer's by up to {canary.mismatch:.4g} "
            f"(tolerance {canary.tolerance:.4g}): it does not serve the weights pushed"
        )
        if self.config.canary is not None and self.config.canary.stop_on_mismatch:
            raise ServedWeightsMismatch(line + " (canary.stop_on_mismatch: the run stops)")
        self._say(line)

    def _say(self, line: str) -> None:
        if self.printer is not None:
            self.printer(line)


class CheckpointLedgerCallback(TrainerCallback):
    """Completes each TRL checkpoint with ``rollgym-state.json``, then acks its groups."""

    def __init__(
        self,
        *,
        client: ServerClient,
        ledger: DataLedger,
        pusher: WeightPusher,
        progress: RunProgress,
        background: BackgroundPush | None = None,
    ) -> None:
        self.background = background
        self.client = client
        self.ledger = ledger
        self.pusher = pusher
        self.progress = progress

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        started = self.progress.steps[-1].at if self.progress.steps else time.time()
        if self.background is not None:  # the state records the version its weights have
            self.background.wait()
        checkpoint_dir = Path(str(args.output_dir)) / f"checkpoint-{state.global_step}"
        snapshot = self.ledger.snapshot(step=state.global_step, policy_version=self.pusher.version)
        write_state(checkpoint_dir, snapshot)
        self.client.ack(snapshot.unacked_group_ids)
        self.ledger.mark_acked(snapshot.unacked_group_ids)
        # TRL saved just before this hook, so the span runs from the step's close.
        self.progress.on_busy(started, time.time(), kind="checkpoint")


def _trust_region_line(step: int, alarms: dict[str, float], config: TrainerConfig) -> str:
    """What the trust region (``trainer.trust_region``) did to a step it did not let stand."""
    head = (
        f"step {step}: KL(before || after) on its batch {alarms['step_kl_full']:.3g} above "
        f"max_step_kl {config.max_step_kl:.3g}"
    )
    if alarms["step_rejected"]:
        return f"UNDONE {head}: no shorter step fitted"
    return f"SHORTENED {head}: the step x{alarms['step_scale']:.2f} (KL {alarms['step_kl']:.3g})"
