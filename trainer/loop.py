"""``train``: one GRPO run against a rollout server, resumable from its last checkpoint.

Wiring (each piece is its own module)::

    ServerClient ── GroupFeed (TRL's rollout_func: pull, window, batch) ──> ServerGRPOTrainer
         │                                                                    │ step
         ├──── WeightPusher  <── StepCallback (push every k, progress) <──────┤
         └──── ack           <── CheckpointLedgerCallback (after each save) <─┘

On resume the latest complete checkpoint's model, optimizer and RNG come back through TRL
(``resume_from_checkpoint``); its unacked groups are acked and will be skipped if they come
again. The server keeps its last applied weights and version across its own restarts, so
if it is at the checkpoint's version it already serves the checkpoint's weights and
nothing is pushed (the groups it buffered stay fresh); if the versions disagree, the first
thing the trainer does is push the restored weights, so the server samples from them
before the first new step. A fresh run pushes its starting weights, unless the caller
knows the server serves them already (``starts_served``: ``trainer.preflight``).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from transformers import PrinterCallback

from rollgym.trainer.background_push import BackgroundPush
from rollgym.trainer.callbacks import CheckpointLedgerCallback, StepCallback
from rollgym.trainer.checkpoint import DropCounts, latest_checkpoint, read_state
from rollgym.trainer.client import ServerClient
from rollgym.trainer.config import BroadcastConfig, TrainerConfig
from rollgym.trainer.dashboard import DashboardCallback
from rollgym.trainer.errors import TrainerConfigError
from rollgym.trainer.evaluate import SuccessRate
from rollgym.trainer.feed import GroupFeed
from rollgym.trainer.final_eval import FinalEvaluation
from rollgym.trainer.grpo import ServerGRPOTrainer, grpo_args, placeholder_prompts
from rollgym.trainer.ledger import DataLedger
from rollgym.trainer.online_eval import BEST_DIR, EvalTask, OnlineEvaluation, OnlinePoint
from rollgym.trainer.progress import RunProgress, StepLog, StepRecord
from rollgym.trainer.rewards import trajectory_return
from rollgym.trainer.series import step_series
from rollgym.trainer.trackers import local_tracking
from rollgym.trainer.weights import WeightPusher

if TYPE_CHECKING:
    from rollgym.trainer.broadcast import WeightBroadcaster


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """How a ``train`` call ended."""

    steps: int
    policy_version: int
    resumed_from: Path | None
    records: list[StepRecord]  # every step of the run, earlier sessions included
    dropped: DropCounts
    groups_trained: int
    stage_shares: dict[str, tuple[float, float]]  # this session: stage -> (busy s, waiting s)
    trl_logs: list[dict[str, float]]  # TRL's per-step logs of this session (loss, IS ratio, ...)
    online_eval: list[OnlinePoint] = dataclasses.field(default_factory=list)  # the whole run's
    best_dir: Path | None = None  # the best online point's weights (trainer.online_eval)
    # this session's turns: "model", "environment" and (turns that used a box) "sandbox"
    # -> their (p50, p90, p99) seconds
    turn_latency: dict[str, tuple[float, float, float]] = dataclasses.field(default_factory=dict)
    # the last weights on the held-out seeds, each env's (empty: not asked, or no step run)
    held_out: dict[str, SuccessRate] = dataclasses.field(default_factory=dict)

    @property
    def undone_steps(self) -> int:
        """Steps the trust region undid (``trainer.trust_region``), over the whole run."""
        return sum(int(record.alarms.get("step_rejected", 0)) for record in self.records)

    @property
    def shortened_steps(self) -> int:
        """Steps the trust region shortened and kept, over the whole run."""
        return sum(0 < record.alarms.get("step_scale", 1.0) < 1 for record in self.records)


def train(
    config: TrainerConfig,
    client: ServerClient,
    model: str | Path,
    *,
    resume: bool = True,
    on_ready: Callable[[], object] | None = None,
    eval_tasks: Sequence[EvalTask] = (),
    held_out_seeds: Sequence[int] = (),
    printer: Callable[[str], object] | None = print,
    starts_served: bool = False,
) -> TrainResult:
    """Train ``model`` (a directory) with GRPO on the server's groups until ``total_steps``.

    ``on_ready`` runs once the server holds the trainer's starting weights (e.g. to start
    the rollout job); ``eval_tasks`` are what ``config.online_eval`` plays (each env the
    run trains on), and, with ``held_out_seeds``, what the last weights play on those seeds
    at the last step, the rollout job stopped first (``trainer.final_eval``); ``printer`` gets the progress table after every step; ``starts_served``: the
    server serves ``model``'s weights at its version now, so a fresh run pushes nothing first.
    """
    if config.online_eval is not None and not eval_tasks:
        raise TrainerConfigError("online_eval needs the task to play: pass eval_tasks")
    checkpoint = latest_checkpoint(config.output_dir) if resume else None
    resumed = read_state(checkpoint) if checkpoint else None
    ledger = DataLedger(resumed)
    if resumed is not None and printer is not None:
        printer(f"resuming from {checkpoint} (step {resumed.step})")
    if resumed is not None:
        client.ack(resumed.unacked_group_ids)
        ledger.mark_acked(resumed.unacked_group_ids)
    step_log = StepLog(config.output_dir / "steps.jsonl")
    step_log.truncate(up_to_step=resumed.step if resumed else 0)

    server_version = client.policy_version()
    pusher = WeightPusher(
        client,
        version=server_version,
        canary=config.canary,
        adapters=config.lora is not None and config.lora.serve == "adapter",
        broadcast=_open_broadcast(client, config.broadcast),
    )
    background = BackgroundPush(pusher) if config.background_push else None
    progress = RunProgress()

    def trainer_version() -> int:  # a pending push's version is the trainer's weights' already
        return background.trainer_version if background is not None else pusher.version

    feed = GroupFeed(client, config, ledger, progress, version=trainer_version)
    step_callback = StepCallback(
        config=config,
        feed=feed,
        pusher=pusher,
        progress=progress,
        step_log=step_log,
        on_ready=on_ready,
        printer=printer,
        push_at_start=(
            not starts_served if resumed is None else resumed.policy_version != server_version
        ),
        background=background,
    )
    ledger_callback = CheckpointLedgerCallback(
        client=client, ledger=ledger, pusher=pusher, progress=progress, background=background
    )
    online = None
    if config.online_eval is not None and eval_tasks:
        online = OnlineEvaluation(
            client=client,
            pusher=pusher,
            config=config.online_eval,
            guard=config.guard,
            tasks=eval_tasks,
            output_dir=config.output_dir,
            resumed_step=resumed.step if resumed else 0,
            printer=printer,
            settle=background.wait if background else None,
        )
    final = None
    if held_out_seeds and eval_tasks:
        final = FinalEvaluation(
            client=client,
            tasks=eval_tasks,
            seeds=held_out_seeds,
            printer=printer,
            settle=background.wait if background else None,
        )
    dashboard = DashboardCallback(client, progress, printer=printer)
    with warnings.catch_warnings():
        # rollout_func is marked experimental; we pin TRL to 1.16.x where it is as documented.
        warnings.filterwarnings("ignore", message=".*'rollout_func'.*", category=UserWarning)
        grpo = ServerGRPOTrainer(
            model=str(model),
            reward_funcs=trajectory_return,
            args=grpo_args(config),
            train_dataset=placeholder_prompts(config),
            rollout_func=feed,
            sample_log=config.output_dir / "samples.jsonl" if config.log_samples else None,
            train_embeddings=config.train_embeddings,
            peft_config=config.lora.peft_config() if config.lora is not None else None,
            max_step_kl=config.max_step_kl,
            series=lambda: step_series(
                progress,
                ledger.dropped,
                online.points if online is not None else (),
                dashboard.cost,
                final.rates if final is not None else {},
            ),
            callbacks=[
                step_callback,  # pushes: the online evaluation measures what it pushed
                *([online] if online is not None else []),
                *([final] if final is not None else []),
                dashboard,
                ledger_callback,
            ],
        )
    grpo.remove_callback(PrinterCallback)  # our table replaces TRL's per-step log dicts
    try:
        with local_tracking(config.output_dir, config.report_to):
            grpo.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    finally:
        if background is not None:
            background.close()
        if pusher.broadcast is not None:
            pusher.broadcast.close()

    shares = progress.stage_shares()
    return TrainResult(
        steps=grpo.state.global_step,
        policy_version=pusher.version,
        resumed_from=checkpoint,
        records=step_log.read(),
        dropped=ledger.dropped.model_copy(),
        groups_trained=ledger.groups_trained,
        stage_shares={k: (v.busy_s, v.waiting_s) for k, v in shares.items()},
        trl_logs=list(grpo.state.log_history),
        online_eval=list(online.points) if online is not None else [],
        best_dir=config.output_dir / BEST_DIR if online is not None and online.best else None,
        turn_latency=progress.turn_latency(),
        held_out=dict(final.rates) if final is not None else {},
    )


def _open_broadcast(
    client: ServerClient, config: BroadcastConfig | None
) -> WeightBroadcaster | None:
    """The broadcast group with the servers (``trainer.broadcast``), or None: uploads.
    Imported here: it loads vLLM's weight transfer, which uploads never need."""
    if config is None:
        return None
    from rollgym.trainer.broadcast import WeightBroadcaster

    return WeightBroadcaster.open(client, config)
