"""What OpenEnv's door costs per step: one env stepped directly, through rollgym's OpenEnv
server, and through ``openenv/Remote-v0`` on top of that (issue 36).

    .venv/bin/python -m bench.openenv_door [--steps 300]

Three rows, one table, the same env (``rollgym/GuessNumber-v0``, every step a rejected
guess, so the env's own work is the same tiny check each time):

* ``direct``       ``env.step`` in this process: the baseline;
* ``openenv /ws``  openenv-core's ``GenericEnvClient`` over its WebSocket session to
                   ``rollgym.doors.openenv_server``'s app (openenv-core's server) on uvicorn
                   on loopback, in this process and event loop;
* ``Remote-v0``    ``openenv/Remote-v0`` (the same client, synchronous, from a worker
                   thread as the runner calls a foreign sync env) against the same server.

Columns: p50 and p90 per step in milliseconds, and the p50 over the direct p50. On a
2-core machine the figures move with other load: compare within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import time
from collections.abc import Callable

ENV_ID = "rollgym/GuessNumber-v0"
NO_TURN_LIMIT = 10**9


def timed(step: Callable[[], object], steps: int) -> list[float]:
    seconds = []
    for _ in range(steps):
        started = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - started)
    return seconds


async def atimed(step: Callable[[], object], steps: int) -> list[float]:
    seconds = []
    for _ in range(steps):
        started = time.perf_counter()
        await step()  # type: ignore[misc]
        seconds.append(time.perf_counter() - started)
    return seconds


async def measure(steps: int) -> dict[str, list[float]]:
    import gymnasium
    from openenv.core import GenericEnvClient

    from rollgym import envs
    from rollgym.doors.openenv_server import EnvSource, openenv_app
    from rollgym.run.loopback import on_loopback

    env = gymnasium.make(ENV_ID, max_episode_steps=NO_TURN_LIMIT)
    env.reset(seed=0)
    rows = {"direct": timed(lambda: env.step("0"), steps)}
    async with on_loopback(
        openenv_app(EnvSource(ENV_ID, {"max_episode_steps": NO_TURN_LIMIT}))
    ) as url:
        async with GenericEnvClient(base_url=url) as client:
            await client.reset(seed=0)
            rows["openenv /ws"] = await atimed(lambda: client.step({"message": "0"}), steps)
        remote = envs.make("openenv/Remote-v0", base_url=url, max_episode_steps=NO_TURN_LIMIT)
        await asyncio.to_thread(remote.reset, seed=0)
        rows["Remote-v0"] = await atimed(lambda: asyncio.to_thread(remote.step, "0"), steps)
        await asyncio.to_thread(remote.close)
    return rows


def table(rows: dict[str, list[float]]) -> str:
    """p50, p90 (nearest rank; ms) and the p50 over the first row's.

    >>> print(table({"a": [0.001, 0.001], "b": [0.002, 0.004]}))
    path             p50 ms   p90 ms  x direct
    a                 1.000    1.000       1.0
    b                 3.000    4.000       3.0
    """
    base = statistics.median(next(iter(rows.values())))
    lines = [f"{'path':<14} {'p50 ms':>8} {'p90 ms':>8}  x direct"]
    for name, seconds in rows.items():
        ordered = sorted(seconds)
        p50, p90 = statistics.median(ordered), ordered[math.ceil(0.9 * len(ordered)) - 1]
        lines.append(f"{name:<14} {1000 * p50:>8.3f} {1000 * p90:>8.3f} {p50 / base:>9.1f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    print(table(asyncio.run(measure(args.steps))))


if __name__ == "__main__":
    main()
