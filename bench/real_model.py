"""Real-model benchmark: SmolLM2-135M-Instruct through the whole stack, and what RL gains.

    .venv/bin/python -m bench.real_model [--episodes 32] [--skip-run] [--run-dir DIR] [--seed N]

Rows, each against a baseline measured in the same run:

1. **generation**, batch 1 and batch 32: generated tokens/s and CPU-seconds (this process and
   its children) per 1,000 generated tokens through the server's engine, vs transformers'
   ``generate`` on the same prompts one at a time (what a user without vLLM would run);
2. **the preset run** (``rollgym run --preset smollm2 [--seed N]``, unless ``--skip-run``): held-out
   success of the pretrained model and of the RL policy on the same 200 held-out seeds,
   with 95% Wilson intervals and the difference's; a GRPO step's time (and its weight push)
   against the time the server spent sampling a step's batch in the same run (busy time:
   asynchronous sampling overlaps training); the trainer's and the server's peak memory.

Its weight updates (538 MB) against a memory copy are ``bench.http``'s. The model is
pulled first if needed. The machine is noisy: compare ratios within a run (the load
average at the start and the end is printed under the table).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

from bench.learning import difference_interval
from bench.server import Row, cpu_seconds, print_table
from rollgym.contract import paths
from rollgym.contract.wire import SamplingSettings
from rollgym.engine.config import EngineConfig
from rollgym.engine.vllm.engine import VLLMEngine
from rollgym.models.catalog import CATALOG
from rollgym.models.pull import is_pulled, pull
from rollgym.server.conversation.codec import ChatCodec

MODEL = CATALOG["smollm2-135m-instruct"]
QUESTIONS = [
    "Guess a number from 1 to 8.",
    "Name a colour.",
    "What is 3 plus 4?",
    "Write one sentence about the sea.",
]
NEW_TOKENS = 64


def prompts(codec: ChatCodec, n: int) -> list[list[int]]:
    return [
        codec.first_prompt([{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}])
        for i in range(n)
    ]


async def engine_rate(engine: VLLMEngine, batch: list[list[int]], concurrent: int) -> tuple:
    """(tokens/s, CPU-s per 1k tokens) generating ``batch``, ``concurrent`` at a time."""
    settings = SamplingSettings(temperature=1.0, max_tokens=NEW_TOKENS)
    cpu, started, tokens = cpu_seconds(), time.perf_counter(), 0
    for start in range(0, len(batch), concurrent):
        chunk = batch[start : start + concurrent]
        done = await asyncio.gather(*(engine.generate(p, settings) for p in chunk))
        tokens += sum(len(g.token_ids) for g in done)
    wall, cpu = time.perf_counter() - started, cpu_seconds() - cpu
    return tokens / wall, cpu / tokens * 1e3


def transformers_rate(model_dir: Path, batch: list[list[int]]) -> tuple:
    """(tokens/s, CPU-s per 1k tokens) of transformers' ``generate``, one prompt at a time."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    cpu, started, tokens = cpu_seconds(), time.perf_counter(), 0
    with torch.no_grad():
        for prompt in batch:
            ids = torch.tensor([prompt])
            out = model.generate(
                ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                do_sample=True, temperature=1.0, pad_token_id=model.config.eos_token_id,
            )  # fmt: skip
            tokens += out.shape[1] - len(prompt)
    wall, cpu = time.perf_counter() - started, cpu_seconds() - cpu
    return tokens / wall, cpu / tokens * 1e3


async def engine_rows(model_dir: Path, episodes: int) -> list[Row]:
    codec = ChatCodec.from_model_dir(model_dir)
    config = EngineConfig(model_dir=model_dir, max_model_len=1024, kv_cache_gib=1.0)
    baseline = transformers_rate(model_dir, prompts(codec, 4))
    rows: list[Row] = []
    async with VLLMEngine(config) as engine:
        for concurrent in (1, 32):
            batch = prompts(codec, max(episodes, concurrent) if concurrent > 1 else 8)
            rate, cost = await engine_rate(engine, batch, concurrent)
            rows.append(
                (
                    f"generation, batch {concurrent}",
                    f"{rate:.0f} tok/s, {cost:.1f} CPU-s/1k tok",
                    f"transformers, batch 1: {baseline[0]:.0f} tok/s, {baseline[1]:.1f} CPU-s/1k",
                    f"{rate / baseline[0]:.1f}x",
                    f"{NEW_TOKENS} new tokens per prompt, temperature 1",
                )
            )
    return rows


def run_rows(run_dir: Path, seed: int | None) -> list[Row]:
    """The preset run, in this process (the trainer); the server is a child process.

    Run before anything else in this process, so that the peak memory of this process and
    of its children is the trainer's and the server's, not the engine rows'.
    """
    import shutil

    from rollgym.run.flags import layered, preset_base
    from rollgym.run.pipeline import RunConfig, run_default

    shutil.rmtree(run_dir, ignore_errors=True)
    values = layered(preset_base("smollm2"), {"run_dir": str(run_dir), "seed": seed})
    started = time.monotonic()
    report = run_default(RunConfig.model_validate(values), printer=lambda line: None)
    wall = time.monotonic() - started
    trainer_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    server_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    records = report.train.records
    step = statistics.median(r.train_s for r in records)
    sampling = report.train.stage_shares["sampling"][0] / len(records)  # one fresh session
    push = statistics.median(r.sync_s for r in records)
    before, after = report.warm_start, report.final
    assert before is not None and after is not None
    low, high = difference_interval(before, after)
    return [
        (
            f"preset run: held-out success ({before.episodes} episodes)",
            f"after RL {after}",
            f"before RL {before}",
            f"{(after.rate - before.rate) * 100:+.1f} pts",
            f"difference 95% CI {low * 100:+.1f} to {high * 100:+.1f} pts; "
            f"{len(records)} steps in {wall / 60:.1f} min",
        ),
        (
            "preset run: one GRPO step (median)",
            f"{step:.1f} s training",
            f"{sampling:.1f} s sampling a batch (mean busy)",
            f"{step / sampling:.1f}x",
            f"weight push {push:.1f} s; "
            f"peak memory: trainer {trainer_peak:.0f} MiB, server {server_peak:.0f} MiB",
        ),
    ]


def load_average() -> str:
    return " ".join(f"{load:.2f}" for load in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=32, help="prompts for the batch-32 row")
    parser.add_argument("--skip-run", action="store_true", help="only the engine rows")
    parser.add_argument("--run-dir", default=str(paths.runs_dir() / "bench-real-model"))
    parser.add_argument("--seed", type=int, help="the preset run's --seed (default: none)")
    args = parser.parse_args()
    model_dir = paths.models_dir() / MODEL.name
    if not is_pulled(MODEL, model_dir):
        pull(MODEL, paths.models_dir(), paths.wheels_dir())
    load_before = load_average()
    run = [] if args.skip_run else run_rows(Path(args.run_dir), args.seed)
    print_table(asyncio.run(engine_rows(model_dir, args.episodes)) + run)
    print(f"load average (1, 5, 15 min): {load_before} at the start, {load_average()} at the end")


if __name__ == "__main__":
    main()
