"""Online evaluation during training, the best weights kept, and a guard against collapse.

Every ``every`` optimizer steps (once that step's weights reached the server),
``OnlineEvaluation`` asks the server for evaluation episodes on seeds of its own
(``trainer.evaluate.evaluate_server``: unfiltered, beside the training job, never trained
on), on each env the run trains on (a mixture: the same seeds on each, the point's rate
pooled over them, each env's kept in ``per_env``), and appends the point to
``<output_dir>/online_eval.jsonl``. The best point's weights
are saved to ``<output_dir>/best`` (a model directory), beside TRL's last checkpoint.

With a guard (``GuardConfig``), a point more than ``margin`` below the best so far sends
training back: the best weights are loaded into the model and pushed to the server (the
version moves forward, as with every push), and the learning rate is multiplied by
``lr_factor``. Every rollback is printed, counted and written with its point. The guard is
a safety net: a recipe that needs it to learn is not a recipe that learns.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from rollgym.contract.wire import SamplingSettings
from rollgym.trainer.client import ServerClient
from rollgym.trainer.config import GuardConfig, OnlineEvalConfig
from rollgym.trainer.evaluate import Evaluation, evaluate_server, wilson_interval
from rollgym.trainer.lora import load_policy
from rollgym.trainer.weights import WeightPusher

POINTS_FILE = "online_eval.jsonl"
BEST_DIR = "best"


@dataclasses.dataclass(frozen=True)
class EvalTask:
    """What the online evaluation plays: an env the run trains on, and its sampling."""

    env_id: str
    env_kwargs: dict[str, object]
    max_turns: int | None
    sampling: SamplingSettings


def evaluate_each(
    client: ServerClient,
    tasks: Sequence[EvalTask],
    seeds: Sequence[int],
    *,
    timeout_s: float = 900.0,
    progress: Callable[[str], object] | None = None,
) -> dict[str, Evaluation]:
    """The served policy on ``seeds`` of each task's env, by env id (``evaluate_server``)."""
    return {
        task.env_id: evaluate_server(
            client,
            env_id=task.env_id,
            env_kwargs=task.env_kwargs,
            seeds=seeds,
            max_turns=task.max_turns,
            sampling=task.sampling,
            timeout_s=timeout_s,
            progress=progress,
        )
        for task in tasks
    }


class EnvScore(BaseModel):
    """One env's part of an online evaluation."""

    model_config = ConfigDict(frozen=True)

    successes: int
    episodes: int

    @property
    def rate(self) -> float:
        return self.successes / self.episodes if self.episodes else 0.0


class OnlinePoint(BaseModel):
    """One online evaluation (a line of ``online_eval.jsonl``); a mixture's envs pooled."""

    model_config = ConfigDict(frozen=True)

    step: int
    policy_version: int
    successes: int
    episodes: int
    low: float
    high: float
    infra_failures: int
    rolled_back: bool = False  # this point sent training back to the best weights
    per_env: dict[str, EnvScore] = {}  # each env's part (a mixture only)

    @property
    def rate(self) -> float:
        return self.successes / self.episodes if self.episodes else 0.0


def read_points(output_dir: Path, *, up_to_step: int | None = None) -> list[OnlinePoint]:
    """The run's online evaluations so far (a resumed run's earlier sessions included)."""
    path = output_dir / POINTS_FILE
    if not path.is_file():
        return []
    points = [OnlinePoint.model_validate_json(line) for line in path.read_text().splitlines()]
    return [p for p in points if up_to_step is None or p.step <= up_to_step]


class OnlineEvaluation(TrainerCallback):
    """See the module docstring; register it after ``StepCallback`` (which pushes)."""

    def __init__(
        self,
        *,
        client: ServerClient,
        pusher: WeightPusher,
        config: OnlineEvalConfig,
        guard: GuardConfig | None,
        tasks: Sequence[EvalTask],
        output_dir: Path,
        resumed_step: int = 0,
        printer: Callable[[str], object] | None = print,
        settle: Callable[[], object] | None = None,
    ) -> None:
        """``settle`` waits for a push still in flight (``trainer.background_push``)."""
        self.settle = settle
        self.client, self.pusher, self.config, self.guard = client, pusher, config, guard
        if not tasks:
            raise ValueError("an online evaluation needs a task to play")
        self.tasks, self.output_dir, self.printer = list(tasks), output_dir, printer
        self.points = read_points(output_dir, up_to_step=resumed_step)
        (output_dir / POINTS_FILE).parent.mkdir(parents=True, exist_ok=True)
        (output_dir / POINTS_FILE).write_text(
            "".join(p.model_dump_json() + "\n" for p in self.points)
        )

    @property
    def best(self) -> OnlinePoint | None:
        """The first point with the highest success so far."""
        return max(self.points, key=lambda p: p.rate, default=None)

    @property
    def rollbacks(self) -> int:
        return sum(p.rolled_back for p in self.points)

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if state.global_step % self.config.every:
            return
        if self.settle is not None:  # the evaluation measures the weights just pushed
            self.settle()
        point = self._evaluate(state.global_step)
        best = self.best
        if best is None or point.rate > best.rate:
            self._keep_best(kw["model"], kw.get("processing_class"))
        elif self.guard is not None and best.rate - point.rate > self.guard.margin:
            point = point.model_copy(update={"rolled_back": True})
            self._roll_back(kw, point, best)
        self.points.append(point)
        with (self.output_dir / POINTS_FILE).open("a") as handle:
            handle.write(point.model_dump_json() + "\n")
        self._say(
            f"  online eval, step {point.step} (version {point.policy_version}): "
            f"{100 * point.rate:.1f}% ({point.successes}/{point.episodes}, 95% CI "
            f"{100 * point.low:.1f}-{100 * point.high:.1f}%)"
            + (f", {point.infra_failures} infrastructure failures" if point.infra_failures else "")
            + "".join(f"\n    {env}: {100 * part.rate:.1f}%" for env, part in point.per_env.items())
        )

    def _evaluate(self, step: int) -> OnlinePoint:
        first = self.config.first_seed
        seeds = range(first, first + self.config.episodes)
        evaluations = evaluate_each(self.client, self.tasks, seeds, timeout_s=self.config.timeout_s)
        per_env = {
            env: EnvScore(successes=e.per_sample.successes, episodes=e.per_sample.episodes)
            for env, e in evaluations.items()
        }
        infra_failures = sum(e.infra_failures for e in evaluations.values())
        successes = sum(part.successes for part in per_env.values())
        episodes = sum(part.episodes for part in per_env.values())
        low, high = wilson_interval(successes, episodes)
        return OnlinePoint(
            step=step,
            policy_version=self.pusher.version,
            successes=successes,
            episodes=episodes,
            low=low,
            high=high,
            infra_failures=infra_failures,
            per_env=per_env if len(per_env) > 1 else {},
        )

    def _keep_best(self, model: Any, tokenizer: Any) -> None:
        best, staging = self.output_dir / BEST_DIR, self.output_dir / f"{BEST_DIR}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        model.save_pretrained(staging)
        if tokenizer is not None:
            tokenizer.save_pretrained(staging)
        shutil.rmtree(best, ignore_errors=True)
        staging.rename(best)  # never a half-written best

    def _roll_back(self, kw: dict[str, Any], point: OnlinePoint, best: OnlinePoint) -> None:
        model = kw["model"]
        saved = load_policy(self.output_dir / BEST_DIR)
        model.load_state_dict(saved.state_dict())
        self.pusher.push(model)
        assert self.guard is not None
        before = _scale_learning_rate(kw["optimizer"], kw.get("lr_scheduler"), self.guard.lr_factor)
        self._say(
            f"GUARD step {point.step}: online success {100 * point.rate:.1f}% is "
            f"{100 * (best.rate - point.rate):.1f} points below the best ({100 * best.rate:.1f}% "
            f"at step {best.step}): back to step {best.step}'s weights (now version "
            f"{self.pusher.version}), learning rate {before:.3g} -> "
            f"{before * self.guard.lr_factor:.3g} (rollback {self.rollbacks + 1})"
        )

    def _say(self, line: str) -> None:
        if self.printer is not None:
            self.printer(line)


def _scale_learning_rate(optimizer: Any, scheduler: Any, factor: float) -> float:
    """Multiply the learning rate by ``factor`` for good (the scheduler's base rates too,
    which a scheduler would otherwise restore at its next step); returns the old rate."""
    before = float(optimizer.param_groups[0]["lr"])
    for group in optimizer.param_groups:
        group["lr"] *= factor
    inner = getattr(scheduler, "scheduler", scheduler)  # accelerate wraps it
    if inner is not None and hasattr(inner, "base_lrs"):
        inner.base_lrs = [rate * factor for rate in inner.base_lrs]
    return before
