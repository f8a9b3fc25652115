"""HTTP and weight-update benchmark: the server's overhead per generation call and a weight
update's speed, each against a baseline measured in the same run.

    VLLM_CPU_OMP_THREADS_BIND=nobind OMP_NUM_THREADS=1 .venv/bin/python -m bench.http \\
        [--calls 100] [--blocks 6] [--updates 5] [--model-dir DIR] [--no-real-model]

1. **HTTP** (the default model): one-token completions (``/v1/completions``, a token-id
   prompt) through the server as ``rollgym serve`` runs it (uvicorn with uvloop and
   httptools, every middleware) on loopback, from a client in another process
   (``bench.loopback_client``), against the same generation called in-process; blocks of
   ``--calls`` alternate between the two. Per call, p50 and p99: the in-process call (the
   baseline); the server's own reading of each call (its ``Server-Timing``: ``total`` from
   the request's arrival to the answer's start, ``engine`` the time it awaited the engine,
   ``http`` the rest, the server's overhead: target <= 1 ms at p50); and the client's
   round trip, which adds the client's own cost and the kernel's loopback.
2. **weight updates**, on the default model and on SmolLM2-135M-Instruct when it is pulled
   (``rollgym model pull smollm2-135m-instruct``): the served model's own weights through
   the server's updater, from memory in 1 MiB chunks (receive, check, load while the old
   weights serve, pause and swap, persist), and pushed over HTTP by the trainer's own code
   (``WeightPusher`` in the client process, on the model loaded with transformers), whose
   body building is set against ``safetensors.torch.save`` of the same parameters (how the
   push built it before). Baseline: a plain copy of the same bytes into a fresh buffer
   (``torch.clone``, which the update at least does). Rounds interleave them. GB/s of the
   whole update (target >= 30% of the copy's), its load and its pause apart (target: pause
   <= 50 ms on the default model). The pause is the time no request could start; it is
   measured here with nothing running (with ``finish``, running requests would drain
   inside it). A floor under the engine's part: the CPU build's repacking alone (vLLM's
   ``dispatch_cpu_unquantized_gemm``, which ends every load, on copies of the model's
   matrices merged as vLLM merges them), set against the target's budget: 30% of the
   copy's best rate, as a time.

The machine is shared and noisy: compare within a run; the spread is min-max over rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

import torch
import uvloop

from bench.server import print_table
from rollgym.contract import paths
from rollgym.contract.wire import SamplingSettings
from rollgym.engine.config import EngineConfig
from rollgym.engine.vllm.engine import VLLMEngine
from rollgym.engine.weights.safetensors_check import checkpoint_files
from rollgym.models.catalog import CATALOG
from rollgym.models.pull import is_pulled
from rollgym.run.loopback import on_loopback
from rollgym.server.access.agent_keys import AgentKeysConfig
from rollgym.server.app import create_app
from rollgym.server.config import ServerSettings
from rollgym.server.routes.deps import Services

ADMIN_TOKEN = "bench-admin-token-0000"
AGENT_KEY = "bench-agent-key-000000"
REAL_MODEL = CATALOG["smollm2-135m-instruct"]


class Borrowed:
    """The bench's engine lent to an app: the app must not start or stop it."""

    def __init__(self, engine: VLLMEngine):
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass


@dataclass
class Loopback:
    """The server on loopback, its services, and the client process that calls it."""

    services: Services
    client: asyncio.subprocess.Process

    async def ask(self, command: str) -> object:
        assert self.client.stdin is not None and self.client.stdout is not None
        self.client.stdin.write(f"{command}\n".encode())
        await self.client.stdin.drain()
        return json.loads(await self.client.stdout.readline())


@contextlib.asynccontextmanager
async def served(engine: VLLMEngine, data_dir: Path) -> AsyncIterator[Loopback]:
    """The app on ``engine`` under uvicorn (as ``rollgym serve`` runs it, access log off)."""
    settings = ServerSettings(
        admin_token=ADMIN_TOKEN,
        data_dir=data_dir,
        engine=engine.config,
        agents=AgentKeysConfig(keys={"bench": AGENT_KEY}),
    )
    app = create_app(settings, engine_factory=lambda config: Borrowed(engine))  # type: ignore[arg-type,return-value]
    async with on_loopback(app) as url:
        client = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.loopback_client",
            url,
            settings.engine.model_name,
            AGENT_KEY,
            ADMIN_TOKEN,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        try:
            yield Loopback(app.state.services, client)
        finally:
            assert client.stdin is not None
            client.stdin.write(b"quit\n")
            await client.wait()


# --- HTTP -------------------------------------------------------------------------------


async def http_table(engine: VLLMEngine, loopback: Loopback, calls: int, blocks: int) -> None:
    one = SamplingSettings(temperature=1.0, max_tokens=1)
    await loopback.ask("calls 20")  # warm-up: connection, first-call costs
    local: list[float] = []
    remote: list[list[float]] = []
    for _ in range(blocks):
        for _ in range(calls):
            started = time.perf_counter()
            await engine.generate([1, 2, 3, 4, 5], one)
            local.append((time.perf_counter() - started) * 1e3)
        answer = await loopback.ask(f"calls {calls}")
        assert isinstance(answer, list)
        remote += answer
    round_trip = [r[0] * 1e3 for r in remote]
    total, in_engine, overhead = ([r[i] for r in remote] for i in (1, 2, 3))
    rows = [
        ("in process (baseline)", local, ""),
        ("server: total (Server-Timing)", total, "arrival to the answer's start"),
        ("server: engine", in_engine, "awaiting the engine"),
        ("server: http = total - engine", overhead, "the overhead; target p50 <= 1 ms"),
        ("client round trip", round_trip, "adds the client and the loopback"),
    ]
    table = [(name, f"{_p(v, 50):.3f}", f"{_p(v, 99):.3f}", note) for name, v, note in rows]
    table.append(
        (
            "client round trip - in process",
            f"{_p(round_trip, 50) - _p(local, 50):.3f}",
            "",
            "the p50s' difference (the old figure)",
        )
    )
    print(f"\nHTTP overhead per one-token completion, {len(remote)} calls each way (ms)")
    print_table(table, headers=("per call", "p50", "p99", "note"))


# --- weights ----------------------------------------------------------------------------


@dataclass
class WeightFigures:
    updates: list[float]  # the whole in-process update, s
    loads: list[float]  # receive, check and load while serving
    pauses: list[float]
    pushes: list[float]  # the trainer's push over HTTP: build the body, upload, apply
    bodies: list[float]  # of which: building the body
    saves: list[float]  # safetensors.torch.save of the same parameters (the push before)
    copies: list[float]  # clone of the same bytes
    repacks: list[float]  # the CPU build's repacking of the same matrices alone


async def weight_figures(loopback: Loopback, path: Path, rounds: int) -> WeightFigures:
    data = path.read_bytes()  # noqa: ASYNC240  # before anything is timed
    source = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    weights, engine = loopback.services.weights, loopback.services.engine
    matrices = merged_matrices(path, loopback.services.engine.config.model_dir)
    figures = WeightFigures([], [], [], [], [], [], [], [])
    for _ in range(rounds):
        started = time.perf_counter()
        source.clone()
        figures.copies.append(time.perf_counter() - started)
        figures.repacks.append(repack_time(matrices))
        started = time.perf_counter()
        result = await weights.from_stream(chunks(data), expected_version=None)
        figures.updates.append(time.perf_counter() - started)
        figures.loads.append(result.load_s)
        figures.pauses.append(result.apply_s)
        pushed = await loopback.ask(f"push {path.parent} {engine.policy_version}")
        assert isinstance(pushed, list)
        body_s, sync_s, save_s = pushed
        figures.pushes.append(body_s + sync_s)
        figures.bodies.append(body_s)
        figures.saves.append(save_s)
    return figures


def weight_rows(name: str, nbytes: int, f: WeightFigures) -> list[tuple[str, ...]]:
    """Medians (min-max); GB/s as a share of the copy's, of the medians and of the bests
    (the least disturbed run of each, as ``bench.server`` keeps)."""
    gb = nbytes / 1e9
    copy, best_copy = statistics.median(f.copies), min(f.copies)

    def rate(times: list[float]) -> str:
        median = statistics.median(times)
        return (
            f"{_ms(times)}, {gb / median:.2f} GB/s = {copy / median:.0%} "
            f"(bests: {best_copy / min(times):.0%})"
        )

    return [
        (
            f"{name} ({nbytes / 1e6:.1f} MB)",
            "memcpy (baseline)",
            f"{_ms(f.copies)}, {gb / copy:.2f} GB/s",
        ),
        ("", "update, in-process", rate(f.updates)),
        ("", "  load while serving", _ms(f.loads)),
        ("", "  pause", _ms(f.pauses)),
        ("", "repacking alone (a floor)", _ms(f.repacks)),
        ("", "30% of memcpy's best, as a time", f"{best_copy / 0.3 * 1e3:.1f} ms (the budget)"),
        ("", "trainer's push, over HTTP", rate(f.pushes)),
        ("", "  building its body", _ms(f.bodies)),
        ("", "  safetensors.save (before)", _ms(f.saves)),
    ]


def merged_matrices(path: Path, model_dir: Path) -> list[torch.Tensor]:
    """The checkpoint's matrices as vLLM's model holds them: the parts its
    ``packed_modules_mapping`` packs together (q, k, v into qkv) concatenated."""
    from safetensors.torch import load_file
    from vllm.model_executor.models import ModelRegistry

    (architecture,) = json.loads((model_dir / "config.json").read_text())["architectures"]
    model_class = ModelRegistry.models[architecture].load_model_cls()
    return merge_packed(load_file(path), getattr(model_class, "packed_modules_mapping", {}))


def merge_packed(
    tensors: dict[str, torch.Tensor], packed: dict[str, list[str]]
) -> list[torch.Tensor]:
    """Each 2-D tensor, the parts of one packed module joined in their mapping's order.

    >>> t = {f"l.{n}.weight": torch.ones(r, 4) for n, r in [("q", 4), ("k", 2), ("o", 4)]}
    >>> [tuple(m.shape) for m in merge_packed(t, {"qkv": ["q", "k", "v"]})]
    [(6, 4), (4, 4)]
    """
    part_of = {part: (whole, i) for whole, parts in packed.items() for i, part in enumerate(parts)}
    groups: dict[str, list[tuple[int, torch.Tensor]]] = {}
    for name, tensor in tensors.items():
        if tensor.dim() != 2:
            continue
        prefix, _, rest = name.removesuffix(".weight").rpartition(".")
        whole, order = part_of.get(rest, (rest, 0))
        groups.setdefault(f"{prefix}.{whole}", []).append((order, tensor))
    return [
        torch.cat([t for _, t in sorted(parts, key=lambda p: p[0])]) for parts in groups.values()
    ]


def repack_time(matrices: list[torch.Tensor]) -> float:
    """Seconds vLLM's CPU build takes to repack fresh copies of ``matrices`` for its GEMM."""
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    layers = []
    for matrix in matrices:
        layer = torch.nn.Module()
        layer.weight = torch.nn.Parameter(matrix.clone(), requires_grad=False)
        layers.append(layer)
    started = time.perf_counter()
    for layer in layers:
        dispatch_cpu_unquantized_gemm(layer, remove_weight=True)
    return time.perf_counter() - started


async def chunks(data: bytes, size: int = 1 << 20) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def _ms(times: list[float]) -> str:
    median, best, worst = statistics.median(times), min(times), max(times)
    return f"{median * 1e3:.1f} ms ({best * 1e3:.1f}-{worst * 1e3:.1f})"


def _p(values: list[float], percent: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[percent - 1]


# --- main -------------------------------------------------------------------------------


async def main(args: argparse.Namespace) -> None:
    models = [Path(args.model_dir)]
    real = paths.models_dir() / REAL_MODEL.name
    if not args.no_real_model and is_pulled(REAL_MODEL, real):
        models.append(real)
    rows: list[tuple[str, ...]] = []
    for index, model_dir in enumerate(models):
        config = EngineConfig(model_dir=model_dir)
        (weights,) = checkpoint_files(model_dir)  # one file: what the trainer uploads
        with tempfile.TemporaryDirectory() as tmp:
            async with VLLMEngine(config) as engine, served(engine, Path(tmp)) as loopback:
                if index == 0:
                    await http_table(engine, loopback, args.calls, args.blocks)
                figures = await weight_figures(loopback, weights, args.updates)
        rows += weight_rows(model_dir.name, weights.stat().st_size, figures)
    print(f"\nweight updates, {args.updates} rounds: median (min-max); GB/s as % of memcpy's")
    print("(targets: update >= 30% of memcpy, pause <= 50 ms on the default model)")
    print_table(rows, headers=("model", "what", "time, GB/s"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=100, help="calls per block")
    parser.add_argument("--blocks", type=int, default=6, help="blocks each way, alternating")
    parser.add_argument("--updates", type=int, default=5, help="rounds per model")
    parser.add_argument("--model-dir", default=str(paths.default_model_dir()))
    parser.add_argument("--no-real-model", action="store_true", help="the default model only")
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:  # as `rollgym serve`
        runner.run(main(parser.parse_args()))
