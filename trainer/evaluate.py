"""Success rate of a policy on held-out task seeds, measured through the rollout server.

``evaluate_server`` asks the server for evaluation episodes (``POST /admin/evaluations``):
``k`` samples per held-out seed with the policy it serves now, played beside any rollout
job, answered as one group per seed with nothing filtered and nothing stored (so
evaluation seeds are never trained on, and training loses no group to an evaluation). An
episode that failed for reasons of the infrastructure is counted as such, never played
again. ``Evaluation`` gives the success rate per sample and pass@k (seeds solved by any
of their samples), each with a Wilson score interval, which stays inside [0, 1] and is
honest for rates near 0 or 1. ``evaluate_weights`` first pushes a model directory's
weights (the server's version moves).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from rollgym.contract.progress import time_left
from rollgym.contract.wire import EvaluationRequest, SamplingSettings, Trajectory
from rollgym.trainer.client import ServerClient
from rollgym.trainer.progress import succeeded
from rollgym.trainer.weights import WeightPusher


@dataclasses.dataclass(frozen=True)
class SuccessRate:
    """``successes`` out of ``episodes``, with a 95% Wilson interval ``[low, high]``."""

    successes: int
    episodes: int
    low: float
    high: float
    mean_reward: float

    @property
    def rate(self) -> float:
        return self.successes / self.episodes if self.episodes else 0.0

    def __str__(self) -> str:
        return (
            f"{100 * self.rate:.1f}% ({self.successes}/{self.episodes}, "
            f"95% CI {100 * self.low:.1f}-{100 * self.high:.1f}%)"
        )


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a binomial rate (``z=1.96``: 95%); it holds the rate
    itself, at 0 and at ``n`` out of ``n`` too (where rounding put the bound past it).

    >>> wilson_interval(48, 48)[1], wilson_interval(0, 11)[0]
    (1.0, 0.0)
    """
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half))


def success_rate(trajectories: Sequence[Trajectory]) -> SuccessRate:
    wins = sum(succeeded(t) for t in trajectories)
    low, high = wilson_interval(wins, len(trajectories))
    rewards = [t.reward for t in trajectories]
    return SuccessRate(wins, len(trajectories), low, high, sum(rewards) / max(len(rewards), 1))


def held_out_seeds(count: int, *, start: int = 10_000_000) -> list[int]:
    """Task seeds far from those training uses (0, 1, 2, ... and the demonstrations')."""
    return list(range(start, start + count))


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """``samples`` episodes on each held-out seed: success per sample and pass@k.

    Rates are over valid episodes; ``infra_failures`` counts those that failed for reasons
    of the infrastructure (the env or sandbox broke), reported apart and not re-sampled.
    """

    seeds: int
    samples: int
    per_sample: SuccessRate
    pass_at_k: SuccessRate
    infra_failures: int

    def summary(self) -> dict[str, object]:
        """The figures as JSON-ready values (``rollgym eval --json``)."""

        def rate(value: SuccessRate) -> dict[str, float]:
            return {**dataclasses.asdict(value), "rate": value.rate}

        return {
            "seeds": self.seeds,
            "samples_per_seed": self.samples,
            "success": rate(self.per_sample),
            f"pass@{self.samples}": rate(self.pass_at_k),
            "infra_failures": self.infra_failures,
        }


def evaluation_of(groups: Sequence[Sequence[Trajectory]], samples: int) -> Evaluation:
    """The figures of one group of ``samples`` episodes per seed."""
    valid = [[t for t in group if t.valid] for group in groups]
    tried = [group for group in valid if group]
    solved = sum(any(succeeded(t) for t in group) for group in tried)
    low, high = wilson_interval(solved, len(tried))
    best = [max(t.reward for t in group) for group in tried]
    return Evaluation(
        seeds=len(groups),
        samples=samples,
        per_sample=success_rate([t for group in valid for t in group]),
        pass_at_k=SuccessRate(solved, len(tried), low, high, sum(best) / max(len(best), 1)),
        infra_failures=sum(len(g) for g in groups) - sum(len(g) for g in valid),
    )


def evaluate_server(
    client: ServerClient,
    *,
    env_id: str,
    env_kwargs: dict[str, object],
    seeds: Sequence[int],
    samples: int = 1,
    max_turns: int | None,
    sampling: SamplingSettings,
    timeout_s: float = 900.0,
    progress: Callable[[str], object] | None = None,
) -> Evaluation:
    """Play ``samples`` episodes per seed with the server's current policy (module docstring).

    With ``progress``, the seeds go in parts of ``PROGRESS_SEEDS`` and a counted line with
    the time left follows each part; without, one request (``timeout_s`` is per request)."""
    parts = [list(seeds)] if progress is None else _parts(seeds, PROGRESS_SEEDS)
    groups: list[list[Trajectory]] = []
    started = time.monotonic()
    for part in parts:
        request = EvaluationRequest(
            env_id=env_id,
            env_kwargs=env_kwargs,
            seeds=part,
            samples=samples,
            max_turns=max_turns,
            sampling=sampling,
        )
        answer = client.evaluate(request, timeout_s=timeout_s)
        groups.extend(group.trajectories for group in answer.groups)
        if progress is not None:
            elapsed = time.monotonic() - started
            progress(counted_line(len(groups) * samples, len(seeds) * samples, elapsed))
    return evaluation_of(groups, samples)


PROGRESS_SEEDS = 64  # seeds per request when progress is shown


def counted_line(done: int, total: int, elapsed_s: float) -> str:
    """The progress of an evaluation, with the time left.

    >>> counted_line(50, 200, elapsed_s=10.0)
    '  evaluated 50/200 episodes, about 0m30s left'
    """
    return f"  evaluated {done}/{total} episodes, {time_left(done, total, elapsed_s)}"


def _parts(seeds: Sequence[int], size: int) -> list[list[int]]:
    return [list(seeds[i : i + size]) for i in range(0, len(seeds), size)]


def evaluate_weights(
    client: ServerClient,
    model_dir: Path,
    *,
    env_id: str,
    env_kwargs: dict[str, object],
    seeds: Sequence[int],
    max_turns: int | None,
    sampling: SamplingSettings,
    timeout_s: float = 900.0,
    progress: Callable[[str], object] | None = None,
) -> SuccessRate:
    """Push ``model_dir``'s weights (a LoRA checkpoint's merged), play one episode per seed,
    return the success rate (``progress``: a counted line as parts finish, ``evaluate_server``)."""
    from rollgym.trainer.lora import load_policy

    WeightPusher.push_policy(client, load_policy(model_dir))
    evaluation = evaluate_server(
        client,
        env_id=env_id,
        env_kwargs=env_kwargs,
        seeds=seeds,
        max_turns=max_turns,
        sampling=sampling,
        timeout_s=timeout_s,
        progress=progress,
    )
    return evaluation.per_sample
