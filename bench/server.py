"""Rollout-server benchmark: every row against a baseline measured in the same run.

    .venv/bin/python -m bench.server [--episodes 64] [--env-latency 0.5]

One vLLM engine (the default model) serves every row:

1. **logprobs**: the raw engine's tokens/s without logprobs (baseline) vs with vLLM's
   default ``logprobs=0`` output (a dict per token, detokenized), and vs the settings the
   server uses (sampled token only, flat, no detokenizing, final output only).
2. **runner, no env**: rollout throughput (tokens/s through runner, codec, buffer) on an
   environment that answers instantly vs the raw engine generating the same tokens from
   the same prompts with the same logprobs (target >= 0.90); the note gives the ratio
   against the raw engine without logprobs too.
3. **runner, env-bound**: end-to-end time with an environment whose steps take
   ``--env-latency`` s and of which only ``episodes / 4`` run at once (a sandbox service
   with that many workers) vs the bound ``max(model time, env time / concurrency)``,
   model time being the raw engine's time for the same tokens (target <= 1.15): the
   runner keeps more episodes in flight than env slots, so generation hides behind env
   waits.
4. **cost** on GuessNumber (a real env): tokens/s, CPU-seconds (server + engine process)
   per 1,000 generated tokens, and the long tail: the share of wall time spent waiting
   for the slowest 10% of episodes.

The HTTP overhead per call and weight updates against a memory copy are ``bench.http``'s.

Timings on a shared machine are noisy: rows interleave their runs with their baseline's
(``--repeats``) and keep the best of each; compare ratios, not absolute numbers. vLLM's
CPU build pins its compute thread to core 0 by default; where other work also lands on
that core, ``VLLM_CPU_OMP_THREADS_BIND=nobind OMP_NUM_THREADS=1`` lets the OS move it
and makes the runs far steadier.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import psutil  # vLLM's own dependency

from rollgym.contract.paths import default_model_dir
from rollgym.contract.wire import PullRequest, RolloutJob, SamplingSettings, Trajectory
from rollgym.engine.config import EngineConfig
from rollgym.engine.vllm.engine import VLLMEngine
from rollgym.envs.spaces import ChatText, Messages
from rollgym.server.buffer.store import TrajectoryBuffer
from rollgym.server.config import BufferConfig, RunnerConfig
from rollgym.server.conversation.codec import ChatCodec
from rollgym.server.observability.metrics import ServerMetrics
from rollgym.server.rollout.environments import RegistryEnvs
from rollgym.server.rollout.episode import EpisodeRunner
from rollgym.server.rollout.runner import RolloutRunner

Row = tuple[str, str, str, str, str]  # what, measured, baseline, ratio, target


class BenchEnv:
    """A chat env for the benchmark: ``turns`` steps, each taking ``latency_s`` (awaited).

    Steps share ``slots``: at most that many run at once, like a sandbox service with a
    fixed number of workers. The server's ``env_s`` includes the wait for a slot; the step's
    own time is reported as its ``sandbox_s`` (the service's share, read beside ``info``).
    """

    def __init__(self, turns: int, latency_s: float, slots: asyncio.Semaphore):
        self.turns, self.latency_s, self.slots = turns, latency_s, slots
        self.observation_space, self.action_space = Messages(), ChatText()
        self._rng = random.Random()
        self.sandbox_s = 0.0

    async def areset(self, *, seed: int | None = None, options: Any = None) -> Any:
        self._step, self._rng = 0, random.Random(seed)
        opening = ({"role": "user", "content": f"Task {seed}: answer anything."},)
        return opening, {}

    async def astep(self, action: str) -> Any:
        async with self.slots:
            started = time.perf_counter()
            if self.latency_s:
                await asyncio.sleep(self.latency_s)
            self.sandbox_s = time.perf_counter() - started
        self._step += 1
        info: dict[str, Any] = {}
        feedback = ({"role": "user", "content": "Go on."},)
        done = self._step >= self.turns
        return feedback, self._rng.random(), done, False, info

    def close(self) -> None:
        pass


class BenchEnvs:
    def __init__(self, turns: int, latency_s: float, slots: int = 1 << 20):
        self.turns, self.latency_s, self.slots = turns, latency_s, slots
        self._slots: asyncio.Semaphore | None = None

    def make(self, env_id: str, env_kwargs: Mapping[str, object], *, max_turns: int | None) -> Any:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.slots)
        return BenchEnv(self.turns, self.latency_s, self._slots)


# --- raw engine -------------------------------------------------------------------------


def raw_params(max_tokens: int, mode: str) -> Any:
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    lean = {"detokenize": False, "output_kind": RequestOutputKind.FINAL_ONLY}
    extra: dict[str, Any] = {
        "none": lean,
        "vllm-default": {"logprobs": 0},
        "server": {**lean, "logprobs": 0, "flat_logprobs": True},
    }[mode]
    return SamplingParams(
        temperature=1.0, max_tokens=max_tokens, min_tokens=max_tokens, ignore_eos=True, **extra
    )


async def raw_generate(engine: VLLMEngine, work: list[tuple[list[int], int]], mode: str) -> float:
    """Wall time for the raw engine to generate ``n`` tokens after each prompt, all at once."""
    await engine.llm.reset_prefix_cache()

    async def one(prompt: list[int], n: int) -> None:
        async for _ in engine.llm.generate(
            {"prompt_token_ids": prompt}, raw_params(n, mode), uuid.uuid4().hex
        ):
            pass

    started = time.perf_counter()
    await asyncio.gather(*(one(p, n) for p, n in work))
    return time.perf_counter() - started


async def logprob_rows(engine: VLLMEngine, episodes: int, repeats: int) -> list[Row]:
    work = [([1, 2, 3, 4, 5 + i % 50], 64) for i in range(episodes)]
    tokens = sum(n for _, n in work)
    times: dict[str, list[float]] = {"none": [], "vllm-default": [], "server": []}
    for _ in range(repeats):  # interleaved; the best of each is the least disturbed
        for mode in times:
            times[mode].append(await raw_generate(engine, work, mode))
    best = {mode: tokens / min(t) for mode, t in times.items()}
    base = f"{best['none']:.0f} tok/s"
    return [
        (
            "raw engine, logprobs=0 (vLLM default output)",
            f"{best['vllm-default']:.0f} tok/s",
            base,
            f"{best['vllm-default'] / best['none']:.2f}",
            "",
        ),
        (
            "raw engine, server's logprob settings",
            f"{best['server']:.0f} tok/s",
            base,
            f"{best['server'] / best['none']:.2f}",
            "",
        ),
    ]


# --- runner -----------------------------------------------------------------------------


async def rollout(
    engine: VLLMEngine,
    codec: ChatCodec,
    envs: Any,
    job: RolloutJob,
    episodes: int,
    concurrency: int,
) -> tuple[float, list[Trajectory], float]:
    """Run ``job`` until ``episodes`` are persisted; (wall s, trajectories, start time)."""
    await engine.llm.reset_prefix_cache()
    groups = episodes // job.group_size
    with tempfile.TemporaryDirectory() as tmp:
        async with TrajectoryBuffer(Path(tmp) / "b.sqlite3", BufferConfig()) as buffer:
            metrics = ServerMetrics()
            episodes_runner = EpisodeRunner(engine, codec, envs, max_model_len=1024)
            runner = RolloutRunner(
                episodes_runner,
                buffer,
                metrics,
                RunnerConfig(max_concurrent_episodes=concurrency),
            )
            job = job.model_copy(update={"groups_per_batch": groups, "seeds": list(range(groups))})
            started_at = time.time()
            started = time.perf_counter()
            await runner.start(job)
            everything = PullRequest(
                trainer_version=0, max_staleness=0, num_groups=groups, timeout_s=600
            )
            pulled, _ = await buffer.pull(everything, 0)  # answers once all are in
            wall = time.perf_counter() - started
            await runner.stop()
    trajectories = [t for g in pulled.groups for t in g.trajectories][:episodes]
    return wall, trajectories, started_at


def turn_work(trajectories: list[Trajectory]) -> list[tuple[list[int], int]]:
    """(context, sampled tokens) of every model turn, to replay on the raw engine."""
    work = []
    for t in trajectories:
        ids = t.prompt_ids + t.completion_ids
        for turn in t.turns:
            work.append((ids[: turn.context_tokens], turn.completion_tokens))
    return work


def job_for(env_id: str, max_tokens: int, group_size: int = 4) -> RolloutJob:
    return RolloutJob(
        env_id=env_id,
        group_size=group_size,
        max_staleness=0,
        drop_zero_variance=False,
        sampling=SamplingSettings(temperature=1.0, max_tokens=max_tokens),
    )


async def runner_rows(
    engine: VLLMEngine, codec: ChatCodec, episodes: int, latency: float, repeats: int
) -> list[Row]:
    free = BenchEnvs(turns=1, latency_s=0.0)
    runner_tps, same_tps, bare_tps = [], [], []
    for _ in range(repeats):  # interleaved; the best of each is the least disturbed
        wall, trajectories, _ = await rollout(
            engine, codec, free, job_for("bench/free", 64), episodes, episodes
        )
        work = turn_work(trajectories)
        tokens = sum(n for _, n in work)
        runner_tps.append(tokens / wall)
        same_tps.append(tokens / await raw_generate(engine, work, "server"))
        bare_tps.append(tokens / await raw_generate(engine, work, "none"))
    best, same, bare = max(runner_tps), max(same_tps), max(bare_tps)
    rows: list[Row] = [
        (
            "runner, no env: rollout tokens/s",
            f"{best:.0f} tok/s",
            f"{same:.0f} tok/s (raw engine, same logprobs)",
            f"{best / same:.2f}",
            f">= 0.90; vs raw without logprobs ({bare:.0f}): {best / bare:.2f}",
        )
    ]
    slots = max(episodes // 4, 2)  # env steps that can run at once
    bound_env = BenchEnvs(turns=2, latency_s=latency, slots=slots)
    walls, bounds, models, envs = [], [], [], []
    for _ in range(max(repeats // 2, 1)):
        wall, trajectories, _ = await rollout(
            engine, codec, bound_env, job_for("bench/slow", 8), episodes, episodes
        )
        env_total = sum(turn.sandbox_s for t in trajectories for turn in t.turns)  # slot waits out
        model = await raw_generate(engine, turn_work(trajectories), "server")
        walls.append(wall)
        models.append(model)
        envs.append(env_total)
        bounds.append(max(model, env_total / slots))
    best = min(range(len(walls)), key=lambda i: walls[i] / bounds[i])
    wall, bound, model, env_total = walls[best], bounds[best], models[best], envs[best]
    rows.append(
        (
            f"runner, env-bound ({latency:.2f} s/step, {slots} steps at once): wall",
            f"{wall:.2f} s",
            f"{bound:.2f} s = max(model {model:.2f}, env {env_total:.1f}/{slots})",
            f"{wall / bound:.2f}",
            "<= 1.15",
        )
    )
    return rows


# --- cost -----------------------------------------------------------------------------


def cpu_seconds() -> float:
    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            total += sum(child.cpu_times()[:2])
    return total


async def cost_rows(engine: VLLMEngine, codec: ChatCodec, episodes: int) -> list[Row]:
    envs = RegistryEnvs(lambda: None)
    cpu = cpu_seconds()
    job = job_for("rollgym/GuessNumber-v0", 16)
    wall, trajectories, started_at = await rollout(engine, codec, envs, job, episodes, episodes)
    cpu = cpu_seconds() - cpu
    tokens = sum(t.completion_tokens for tr in trajectories for t in tr.turns)
    ends = sorted(t.created_at - started_at for t in trajectories)
    p90 = ends[max(int(len(ends) * 0.9) - 1, 0)]
    tail = (ends[-1] - p90) / ends[-1]
    return [
        (
            f"GuessNumber cost ({episodes} episodes)",
            f"{tokens / wall:.0f} tok/s; {cpu / tokens * 1e3:.2f} CPU-s/1k tok",
            f"{len(trajectories)} episodes in {wall:.2f} s",
            "",
            f"long tail: {tail:.0%} of wall on the slowest 10%",
        )
    ]


HEADERS = ("row", "measured", "baseline (same run)", "ratio", "target / note")


def print_table(rows: Sequence[tuple[str, ...]], headers: tuple[str, ...] = HEADERS) -> None:
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    line = "  ".join("-" * w for w in widths)
    print(line)
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    print(line)
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    print(line)


async def main(args: argparse.Namespace) -> None:
    model_dir = Path(args.model_dir)
    config = EngineConfig(model_dir=model_dir, max_model_len=1024, max_num_seqs=256)
    codec = ChatCodec.from_model_dir(model_dir)
    async with VLLMEngine(config) as engine:
        rows = await logprob_rows(engine, args.episodes, args.repeats)
        rows += await runner_rows(engine, codec, args.episodes, args.env_latency, args.repeats)
        rows += await cost_rows(engine, codec, args.episodes)
    print_table(rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--env-latency", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=5, help="interleaved runs per row")
    parser.add_argument("--model-dir", default=str(default_model_dir()))
    asyncio.run(main(parser.parse_args()))
