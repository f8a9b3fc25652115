"""Measure a model at two precisions on the same held-out seeds, and judge the red line.

``compare_precisions`` runs one vLLM engine per precision, one after the other (never both
in memory), plays one episode per held-out seed with each (``EpisodeRunner``: the
server's own episodes), and measures per precision the success rate with its Wilson
interval, tokens per busy second, and for the lower precision the KL from its behaviour
logprobs to the training precision's, scored by transformers in the training precision
on the very tokens it sampled. ``judge`` turns two runs into a ``PrecisionVerdict``.

Sampling is random in both runs (and a sampling seed would not pair them: the two
precisions' logits differ, so the same seed draws other tokens), so the two rates differ by
chance even at equal precision: that is what the printed intervals are for.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rollgym.contract.precision import (
    PrecisionRun,
    PrecisionVerdict,
    difference_interval,
    weights_fingerprint,
)
from rollgym.contract.wire import SamplingSettings, Trajectory
from rollgym.trainer.evaluate import success_rate

if TYPE_CHECKING:
    from rollgym.sandboxes.pool import WarmPool


@dataclasses.dataclass(frozen=True)
class HeldOutTask:
    env_id: str
    env_kwargs: dict[str, object]
    seeds: list[int]
    max_turns: int | None
    sampling: SamplingSettings
    concurrency: int = 64


async def play(
    model_dir: Path, precision: str, task: HeldOutTask, *, max_model_len: int = 1024
) -> tuple[list[Trajectory], float]:
    """One episode per seed at ``precision``; returns them and the engine's tokens/s. A
    sandboxed env's episodes get a Docker pool of their own (``sandbox_pool``)."""
    from rollgym.engine.config import EngineConfig
    from rollgym.engine.vllm.engine import VLLMEngine
    from rollgym.server.conversation.codec import ChatCodec
    from rollgym.server.rollout.environments import RegistryEnvs, takes_pool
    from rollgym.server.rollout.episode import EpisodeRunner, EpisodeSpec

    config = EngineConfig(
        model_dir=model_dir,
        dtype="bfloat16" if precision == "fp8" else precision,
        quantization="fp8" if precision == "fp8" else None,
        max_model_len=max_model_len,
    )
    codec = ChatCodec.from_model_dir(model_dir)
    async with contextlib.AsyncExitStack() as stack:
        pool = stack.enter_context(sandbox_pool(task)) if takes_pool(task.env_id) else None
        # an episode holds its box from reset to end: more at once would only wait for one
        # (and time out: 23 of 100 SmolLM2 episodes did, 64 at once on 16 boxes)
        slots = asyncio.Semaphore(eval_boxes(task) if pool else task.concurrency)
        engine = await stack.enter_async_context(VLLMEngine(config))
        runner = EpisodeRunner(
            engine, codec, RegistryEnvs(lambda: pool), max_model_len=max_model_len
        )
        before = engine.meter.totals()

        async def one(seed: int) -> Trajectory:
            async with slots:
                return await runner.run(EpisodeSpec.of(task, seed))

        episodes = list(await asyncio.gather(*(one(seed) for seed in task.seeds)))
        after = engine.meter.totals()
    busy = after.busy_s - before.busy_s
    return episodes, (after.tokens - before.tokens) / busy if busy > 0 else 0.0


def eval_boxes(task: HeldOutTask) -> int:
    """Boxes for a sandboxed task's evaluation, and so its episodes at once: at most 16."""
    return min(task.concurrency, len(task.seeds), 16)


def sandbox_pool(task: HeldOutTask) -> WarmPool:
    """A Docker pool for a sandboxed task's episodes: a box per episode played at once."""
    from rollgym.sandboxes.config import PoolConfig
    from rollgym.sandboxes.docker import DockerSandboxPool

    return DockerSandboxPool(PoolConfig(size=eval_boxes(task)))


def kl_to_training(
    model_dir: Path, training: str, episodes: Sequence[Trajectory], temperature: float
) -> float | None:
    """Mean per model token of ``exp(r) - 1 - r``, ``r = logp_training - logp_behaviour``.

    An unbiased, never negative estimate of KL(behaviour || training) from samples of the
    behaviour policy (Schulman's k3); ``logp_training`` is transformers' log-softmax of
    ``logits / temperature`` (the distribution sampled) in the training precision.
    """
    if temperature <= 0:
        return None  # greedy: the sampled distribution is a point mass, no KL to speak of
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, training))
    total, count = 0.0, 0
    with torch.no_grad():
        for episode in episodes:
            positions = [i for i, m in enumerate(episode.loss_mask) if m]
            if not positions:
                continue
            context = episode.prompt_ids + episode.completion_ids
            logits = model(torch.tensor([context])).logits[0].float()
            logprobs = torch.log_softmax(logits / temperature, dim=-1)
            start = len(episode.prompt_ids)
            for i in positions:
                r = logprobs[start + i - 1, context[start + i]].item() - episode.logprobs[i]
                total += math.expm1(r) - r
                count += 1
    return total / count if count else None


def summarize(
    precision: str, episodes: Sequence[Trajectory], tokens_per_s: float, kl: float | None = None
) -> PrecisionRun:
    rate = success_rate(episodes)
    return PrecisionRun(
        precision=precision,
        episodes=rate.episodes,
        successes=rate.successes,
        low=rate.low,
        high=rate.high,
        mean_reward=rate.mean_reward,
        tokens_per_s=tokens_per_s,
        kl_to_training=kl,
    )


def judge(
    training: PrecisionRun,
    candidate: PrecisionRun,
    *,
    red_line_points: float,
    weights: str,
    env_id: str,
    seeds: list[int],
) -> PrecisionVerdict:
    """Admitted when success drops by at most ``red_line_points`` percentage points.

    >>> run = lambda p, wins: PrecisionRun(precision=p, episodes=100, successes=wins,
    ...     low=0.0, high=1.0, mean_reward=0.0, tokens_per_s=1.0)
    >>> judge(run("float32", 80), run("bfloat16", 79), red_line_points=2, weights="w",
    ...       env_id="e", seeds=[]).admitted
    True
    >>> judge(run("float32", 80), run("bfloat16", 77), red_line_points=2, weights="w",
    ...       env_id="e", seeds=[]).admitted
    False
    """
    low, high = difference_interval(
        training.rate,
        (training.low, training.high),
        candidate.rate,
        (candidate.low, candidate.high),
    )
    drop = 100 * (training.rate - candidate.rate)
    return PrecisionVerdict(
        weights=weights,
        env_id=env_id,
        seeds=seeds,
        training=training,
        candidate=candidate,
        red_line_points=red_line_points,
        drop_points=drop,
        drop_low=100 * low,
        drop_high=100 * high,
        admitted=drop <= red_line_points + 1e-9,
        at=time.time(),
    )


async def compare_precisions(
    model_dir: Path,
    task: HeldOutTask,
    *,
    training: str,
    candidate: str,
    red_line_points: float,
    **play_options: Any,
) -> PrecisionVerdict:
    """Both runs and the verdict (see the module docstring)."""
    base_episodes, base_rate = await play(model_dir, training, task, **play_options)
    episodes, rate = await play(model_dir, candidate, task, **play_options)
    kl = await asyncio.to_thread(
        kl_to_training, model_dir, training, episodes, task.sampling.temperature
    )
    return judge(
        summarize(training, base_episodes, base_rate),
        summarize(candidate, episodes, rate, kl),
        red_line_points=red_line_points,
        weights=weights_fingerprint(model_dir),
        env_id=task.env_id,
        seeds=list(task.seeds),
    )
