"""Env benchmark: per-step time in each reference env, apart from time in the sandbox.

    .venv/bin/python -m bench.envs [--pool docker|fake] [--rounds 2]

Drives every task of every reference env with its scripted solver and a wrong policy, and
reports each step's time (``env.step``, sandbox included, timed here as the server does) and
its time in sandbox calls (``env.get_wrapper_attr("sandbox_s")``) as p50/p99 in ms, plus the env's own
overhead (``env_s - sandbox_s``). Baseline, measured in the same run on the same pool: a
bare sandbox call (``run_shell("true")``, ``run_python("pass")``); the last columns are
each env's p50 step time as a multiple of the bare shell call, and the p50 over only the
steps that called the sandbox (an answer or a rejected message does not).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import gymnasium

from rollgym import envs
from rollgym.envs.scripted import fenced, solver
from rollgym.sandboxes.base import SandboxPool
from rollgym.sandboxes.config import PoolConfig

WRONG: dict[str, Callable[[gymnasium.Env[Any, Any]], Callable[[list[Any]], str]]] = {
    "rollgym/GuessNumber-v0": lambda env: lambda history: "0",
    "rollgym/PythonTests-v0": lambda env: (
        lambda history: fenced("python", "def f():\n    return 0")
    ),
    "rollgym/Shell-v0": lambda env: lambda history: fenced("bash", "ls -la"),
    "rollgym/ToolUse-v0": lambda env: lambda history: "<answer>no idea</answer>",
}


def pct(values: list[float], q: int) -> float:
    """The q-th percentile in ms."""
    if len(values) < 2:
        return values[0] * 1e3 if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] * 1e3


@contextmanager
def open_pool(kind: str) -> Iterator[SandboxPool]:
    config = PoolConfig(size=2, health_interval_s=0)
    if kind == "fake":
        from rollgym.sandboxes.fake import FakeSandboxPool

        with FakeSandboxPool(config) as fake:
            yield fake
    else:
        from rollgym.sandboxes.docker import DockerSandboxPool

        with DockerSandboxPool(config) as docker_pool:
            yield docker_pool


def bare_calls(pool: SandboxPool, count: int = 200) -> dict[str, list[float]]:
    """Round trips of the cheapest shell and Python calls: the baseline."""
    times: dict[str, list[float]] = {"shell": [], "python": []}
    with pool.sandbox(timeout=60) as box:
        for _ in range(count):
            start = time.perf_counter()
            box.run_shell("true")
            times["shell"].append(time.perf_counter() - start)
            start = time.perf_counter()
            box.run_python("pass")
            times["python"].append(time.perf_counter() - start)
    return times


def task_ids(env: gymnasium.Env[Any, Any]) -> list[str]:
    base: Any = env.unwrapped
    return base.task_ids() if hasattr(base, "task_ids") else [t.id for t in base.tasks]


Steps = list[tuple[float, float]]


def env_steps(env_id: str, pool: SandboxPool, rounds: int) -> Steps:
    """``(env_s, sandbox_s)`` of every step of solver and wrong-policy episodes."""
    kwargs: dict[str, Any] = {} if env_id == "rollgym/GuessNumber-v0" else {"sandbox_pool": pool}
    env = gymnasium.make(env_id, **kwargs)
    samples = []
    for _ in range(rounds):
        for task_id in task_ids(env):
            for policy_for in (solver, WRONG[env_id]):
                obs, _ = env.reset(options={"task_id": task_id})
                history, policy, done = list(obs), policy_for(env), False
                while not done:
                    action = policy(history)
                    started = time.perf_counter()
                    obs, _, terminated, truncated, _ = env.step(action)
                    env_s = time.perf_counter() - started
                    history += [{"role": "assistant", "content": action}, *obs]
                    samples.append((env_s, env.get_wrapper_attr("sandbox_s")))
                    done = terminated or truncated
    env.close()
    return samples


def print_table(kind: str, baseline: dict[str, list[float]], results: dict[str, Steps]) -> None:
    shell_p50 = pct(baseline["shell"], 50)
    print(f"pool: {kind}; times in ms (a shared, loaded 2-core machine: expect noise)")
    print(f"baseline bare call p50/p99: shell {shell_p50:.2f}/{pct(baseline['shell'], 99):.2f}, "
          f"python {pct(baseline['python'], 50):.2f}/{pct(baseline['python'], 99):.2f}")  # fmt: skip
    columns = ["steps", "env p50", "env p99", "sbx p50", "sbx p99", "own p50", "own p99"]
    columns += ["x shell", "sbx-step p50"]
    print(f"{'env':<16}" + "".join(f"{c:>13}" for c in columns))
    for env_id, samples in results.items():
        env_s = [e for e, _ in samples]
        sandbox_s = [s for _, s in samples]
        own = [e - s for e, s in samples]
        boxed = [e for e, s in samples if s > 0]  # steps that called the sandbox at all
        row = [pct(env_s, 50), pct(env_s, 99), pct(sandbox_s, 50), pct(sandbox_s, 99)]
        row += [pct(own, 50), pct(own, 99), pct(env_s, 50) / shell_p50]
        row += [pct(boxed, 50) if boxed else 0.0]
        name = env_id.removeprefix("rollgym/")
        print(f"{name:<16}{len(samples):>13}" + "".join(f"{v:>13.3f}" for v in row))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", choices=("docker", "fake"), default="docker")
    parser.add_argument("--rounds", type=int, default=2, help="passes over every task")
    args = parser.parse_args()
    with open_pool(args.pool) as pool:
        baseline = bare_calls(pool)
        results = {env_id: env_steps(env_id, pool, args.rounds) for env_id in envs.BUILTIN_IDS}
    print_table(args.pool, baseline, results)


if __name__ == "__main__":
    main()
