"""LoRA against full fine-tuning on the same model, in the same run: pushes, pauses, trainer
memory and step time, and what serving an adapter costs the sampler.

    .venv/bin/python -m bench.lora [--models rollgym-tiny,smollm2-135m-instruct] [--runs 3]
                                   [--steps 6] [--pushes 10] [--rank 16]

Per model, three arms, each a real ``rollgym serve`` on loopback and a GRPO trainer in a
child process of its own (so its peak memory is its own; it runs on tcmalloc and imports
TRL without vLLM, as ``rollgym run`` and ``rollgym train`` do), pushing after every step while
the server samples GuessNumber groups (the trainer's peak memory is read when training ends):

- ``full``: every weight trained, whole weights pushed to a plain server (the baseline);
- ``lora-merged``: rank-``r`` adapters on attention and MLP (``trainer.lora``), the merged
  weights pushed to the same kind of server;
- ``lora-adapter``: the same adapters pushed alone (``trainer.lora.serve='adapter'``) to a
  server with ``engine.lora`` (vLLM's LoRA serving).

After its ``--steps`` steps each arm stops the rollouts and pushes its last policy
``--pushes`` more times to the idle server: the update's bytes, its time as the trainer
sees it (upload, checks, apply, canary, answer: ``WeightSync.sync_s``) and the server's
pause (``apply_s``). Then, in this process, the engine's sampling rate (32 prompts, 64 new
tokens each, temperature 1) with the base model alone and with an adapter loaded (``engine.lora``).

The table gives each row's median over the arm's pushes or steps, then the spread over the
runs (min-max). Issue 38's targets: an adapter update at most 50 ms p50, its pause at most
10 ms, the LoRA trainer's peak memory at most half of full fine-tuning's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import as_a_rollgym_trainer
from bench.server import print_table
from rollgym.contract import paths

ARMS = ("full", "lora-merged", "lora-adapter")
HEADERS = ("model", "row", "full", "lora-merged", "lora-adapter", "note")
BATCH, NEW_TOKENS = 32, 64


# --- one arm, in a child process ---------------------------------------------------------------


def run_arm(arm: str, model_dir: Path, url: str, token: str, steps: int, pushes: int, rank: int):
    """Train ``steps`` GRPO steps against the server at ``url``, then push ``pushes`` times;
    the measurements as a dict (this process's peak memory included)."""
    import torch

    from rollgym.contract.wire import RolloutJob, SamplingSettings
    from rollgym.trainer.checkpoint import latest_checkpoint
    from rollgym.trainer.client import ServerClient
    from rollgym.trainer.config import ClientConfig, TrainerConfig
    from rollgym.trainer.loop import train
    from rollgym.trainer.lora import LoraSettings, load_policy
    from rollgym.trainer.weights import WeightPusher

    torch.set_num_threads(1)  # the server has the other core
    lora = None if arm == "full" else LoraSettings(rank=rank, serve=arm.removeprefix("lora-"))
    job = RolloutJob(
        env_id="rollgym/GuessNumber-v0",
        env_kwargs={"low": 1, "high": 8},
        group_size=4,
        groups_per_batch=2,
        max_staleness=1,
        max_turns=2,
        sampling=SamplingSettings(temperature=1.0, max_tokens=16),
        drop_zero_variance=False,
    )
    with tempfile.TemporaryDirectory() as scratch:
        config = TrainerConfig(
            output_dir=Path(scratch) / "grpo",
            group_size=4,
            groups_per_batch=2,
            max_staleness=1,
            total_steps=steps,
            learning_rate=1e-4,
            lora=lora,
        )
        client = ServerClient(ClientConfig(url=url, admin_token=token))
        with client:
            result = train(
                config, client, model_dir, on_ready=lambda: client.start_rollouts(job), printer=None
            )
            client.stop_rollouts()
            peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # training's
            policy = load_policy(latest_checkpoint(config.output_dir))
            pusher = WeightPusher(
                client,
                version=client.policy_version(),
                canary=config.canary,
                adapters=lora is not None and lora.serve == "adapter",
            )
            syncs = [pusher.push(policy) for _ in range(pushes)]
            pusher.canary = None
            unchecked = [pusher.push(policy) for _ in range(pushes)]
    return {
        "bytes": statistics.median(s.bytes for s in syncs),
        "update_s": statistics.median(s.sync_s for s in syncs),
        "unchecked_s": statistics.median(s.sync_s for s in unchecked),
        "prepare_s": statistics.median(s.serialize_s for s in syncs),
        "load_s": statistics.median(s.server.load_s for s in syncs if s.server),
        "pause_s": statistics.median(s.server.apply_s for s in syncs if s.server),
        "canary": max(s.server.canary.mismatch for s in syncs if s.server and s.server.canary),
        "train_s": statistics.median(r.train_s for r in result.records),
        "step_sync_s": statistics.median(r.sync_s for r in result.records),
        "peak_mib": peak_mib,
    }


def arm_in_server(arm: str, model_dir: Path, args: argparse.Namespace, root: Path) -> dict:
    """One arm: its server (engine.lora for ``lora-adapter``), its trainer in a child."""
    from rollgym.contract.adapter import served_lora_rank
    from rollgym.run.server_process import ServerProcess

    settings = {"ROLLGYM_ENGINE__MAX_MODEL_LEN": "1024"}
    if arm == "lora-adapter":
        settings["ROLLGYM_ENGINE__LORA__MAX_RANK"] = str(served_lora_rank(args.rank))
    with ServerProcess(
        model_dir=model_dir, data_dir=root / arm / "server", settings=settings, threads=1
    ) as server:
        out = root / arm / "arm.json"
        command = [
            sys.executable, "-m", "bench.lora", "--arm", arm, "--model-dir", str(model_dir),
            "--url", server.url, "--steps", str(args.steps), "--pushes", str(args.pushes),
            "--rank", str(args.rank), "--out", str(out),
        ]  # fmt: skip
        env = {**os.environ, "ROLLGYM_ADMIN_TOKEN": server.admin_token}
        subprocess.run(command, check=True, env=env)
    for kept in (root / arm / "server").iterdir():  # the log stays; weights are GBs a run
        if kept.name != "server.log":
            shutil.rmtree(kept) if kept.is_dir() else kept.unlink()
    return json.loads(out.read_text())


# --- sampling with and without an adapter, in this process --------------------------------------


async def sampling_rates(model_dir: Path, rank: int, scratch: Path) -> dict[str, float]:
    """Generated tokens/s of the plain engine and of an ``engine.lora`` one serving an
    adapter (random ``B``: peft's zero start would let a kernel skip nothing anyway)."""
    import torch
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    from rollgym.contract.adapter import served_lora_rank
    from rollgym.contract.wire import SamplingSettings
    from rollgym.engine.config import EngineConfig, LoraServingConfig
    from rollgym.engine.metrics import NullMetrics
    from rollgym.engine.vllm.engine import VLLMEngine
    from rollgym.engine.weights.store import PolicyStore
    from rollgym.engine.weights.updater import WeightUpdater
    from rollgym.trainer.lora import LoraSettings, adapter_tensors
    from rollgym.trainer.weights import SafetensorsBody

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model = get_peft_model(base, LoraSettings(rank=rank).peft_config())
    for name, param in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.01)
    adapter = b"".join(bytes(part) for part in SafetensorsBody(*adapter_tensors(model)))

    async def body():
        yield adapter

    settings = SamplingSettings(temperature=1.0, max_tokens=NEW_TOKENS)
    prompts = [[1, 5, 9, 20 + i, 33, 7, 8, 100] for i in range(BATCH)]
    rates = {}
    for kind in ("plain", "adapter"):
        lora = LoraServingConfig(max_rank=served_lora_rank(rank)) if kind == "adapter" else None
        config = EngineConfig(model_dir=model_dir, max_model_len=1024, kv_cache_gib=1.0, lora=lora)
        async with VLLMEngine(config) as engine:
            if lora is not None:
                store = PolicyStore(scratch / kind / "policy")
                updater = WeightUpdater(
                    engine,
                    scratch / kind / "staging",
                    store,
                    max_bytes=1 << 31,
                    metrics=NullMetrics(),
                )
                await updater.from_stream(body(), None)
            best = 0.0
            for attempt in range(3):  # the first pays one-time costs; the best of the others
                started = time.perf_counter()
                done = await asyncio.gather(
                    *(engine.generate(p, settings, seed=i) for i, p in enumerate(prompts))
                )
                rate = sum(len(g.token_ids) for g in done) / (time.perf_counter() - started)
                best = max(best, rate) if attempt else best
            rates[kind] = best
    return rates


# --- the table ---------------------------------------------------------------------------------


def spread(values: list[float], fmt: str) -> str:
    """The median over runs, with min-max when there are several."""
    middle = format(statistics.median(values), fmt)
    if len(values) == 1:
        return middle
    return f"{middle} ({format(min(values), fmt)}-{format(max(values), fmt)})"


ROWS = (  # key, label, format, scale
    ("bytes", "push size (MB)", ".2f", 1e-6),
    ("prepare_s", "push prepared (ms): tensors, canary probes", ".1f", 1e3),
    ("update_s", "update (ms): upload, checks, load, apply, canary", ".1f", 1e3),
    ("load_s", "of it the server's receive, checks and load (ms)", ".1f", 1e3),
    ("pause_s", "of it the server's pause (ms)", ".2f", 1e3),
    ("unchecked_s", "update without the canary (ms)", ".1f", 1e3),
    ("canary", "canary mismatch (max, nats)", ".1e", 1.0),
    ("train_s", "GRPO step: training (s, median)", ".2f", 1.0),
    ("step_sync_s", "GRPO step: blocked on the push (s, median)", ".3f", 1.0),
    ("peak_mib", "trainer peak memory (MiB)", ".0f", 1.0),
)


def table(results: dict[str, list[dict]]) -> list[tuple[str, ...]]:
    rows = []
    for model, runs in results.items():
        for key, label, fmt, scale in ROWS:
            cells = [
                spread([run["arms"][arm][key] * scale for run in runs], fmt)
                if all(arm in run["arms"] for run in runs)
                else "-"
                for arm in ARMS
            ]
            rows.append((model, label, *cells, ""))
        plain = [run["sampling"]["plain"] for run in runs]
        served = [run["sampling"]["adapter"] for run in runs]
        ratio = [p / a for p, a in zip(plain, served, strict=True)]
        rows.append(
            (
                model,
                f"sampling, batch {BATCH} x {NEW_TOKENS} tokens (tok/s)",
                spread(plain, ".0f"),
                spread(plain, ".0f"),
                spread(served, ".0f"),
                f"an adapter served: {spread(ratio, '.2f')}x slower",
            )
        )
        if not all({"full", "lora-adapter"} <= run["arms"].keys() for run in runs):
            continue
        full_peak = [run["arms"]["full"]["peak_mib"] for run in runs]
        lora_peak = [run["arms"]["lora-adapter"]["peak_mib"] for run in runs]
        share = [lo / fu for lo, fu in zip(lora_peak, full_peak, strict=True)]
        rows.append(
            (model, "LoRA trainer peak / full", "1", "", spread(share, ".2f"), "target <= 0.5")
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="rollgym-tiny,smollm2-135m-instruct")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6, help="GRPO steps per arm")
    parser.add_argument("--pushes", type=int, default=10, help="timed pushes per arm")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--arms", default=",".join(ARMS), help="a subset, to look at one")
    parser.add_argument("--out", default=str(paths.runs_dir() / "bench-lora" / "results.json"))
    parser.add_argument("--arm", choices=ARMS, help=argparse.SUPPRESS)  # the child's
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.arm is not None:  # the trainer's child: tcmalloc, no vLLM, as in rollgym run
        as_a_rollgym_trainer()
        measured = run_arm(
            args.arm, Path(args.model_dir), args.url, os.environ["ROLLGYM_ADMIN_TOKEN"],
            args.steps, args.pushes, args.rank,
        )  # fmt: skip
        Path(args.out).write_text(json.dumps(measured))
        return

    from rollgym.models.catalog import CATALOG
    from rollgym.models.pull import is_pulled, pull

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[dict]] = {}
    started = time.monotonic()
    for run in range(args.runs):
        for name in args.models.split(","):
            model_dir = paths.models_dir() / name
            if name in CATALOG and not is_pulled(CATALOG[name], model_dir):
                pull(CATALOG[name], paths.models_dir(), paths.wheels_dir())
            root = out.parent / f"run{run + 1}" / name  # the servers' logs stay here
            shutil.rmtree(root, ignore_errors=True)
            arms = {arm: arm_in_server(arm, model_dir, args, root) for arm in args.arms.split(",")}
            sampling = asyncio.run(sampling_rates(model_dir, args.rank, root))
            results.setdefault(name, []).append({"arms": arms, "sampling": sampling})
            out.write_text(json.dumps(results, indent=1))
            print(
                f"run {run + 1}/{args.runs}, {name}: done at {(time.monotonic() - started) / 60:.1f} min",
                flush=True,
            )
    print_table(table(results), HEADERS)
    print(
        f"{args.runs} runs, rank {args.rank} on attention and MLP, {args.steps} GRPO steps and "
        f"{args.pushes} idle pushes per arm; results in {out}; load average {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
