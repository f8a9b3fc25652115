"""The server under big bodies and under weight updates: two figures of issue 14.

    .venv/bin/python -m bench.robustness stall [--mb 10]
    .venv/bin/python -m bench.robustness updates [--updates 20] [--clients 16]

Each starts a real ``rollgym serve`` (vLLM engine) on loopback.

* ``stall``: the longest event-loop stall while bodies of ``--mb`` MB (and the largest
  bodies the cap lets through) reach every kind of route, against the same server idle
  (the baseline). Read from the server's own lag watch (``rollgym_event_loop_lag_seconds``:
  how late a 10 ms sleep wakes), and from a client polling ``/health`` meanwhile. Goal:
  under 50 ms.
* ``updates``: ``--clients`` concurrent completion loops while ``--updates`` weight
  updates are pushed, in both in-flight modes (``finish``, ``abort``). Counts requests,
  failed requests and mixed-version turns (the engine refuses to answer a generation whose
  tokens carry two versions; the count is of those refusals); goal 0 and 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

from rollgym.run.server_process import ServerProcess
from rollgym.server.config import ServerSettings

MODEL = "rollgym-tiny"
AGENT_KEY = "bench-agent-key-000000"  # agent routes need one; a bench has no secrets
AGENT = {"Authorization": f"Bearer {AGENT_KEY}"}


def _server(root: Path, model_dir: Path, **settings: str) -> ServerProcess:
    return ServerProcess(
        model_dir=model_dir,
        data_dir=root,
        threads=1,
        settings={
            "ROLLGYM_ENGINE__MAX_MODEL_LEN": "1024",
            "ROLLGYM_AGENTS__KEYS": json.dumps({"bench": AGENT_KEY}),
            **settings,
        },
    )


# --- stall ----------------------------------------------------------------------------------


def _bodies(mb: int, cap: int) -> list[tuple[str, str, bytes, bool]]:
    """(what, path, body, admin): every kind of route, over the cap and just under it."""
    big = "x" * (mb << 20)
    under = "x" * (cap - 200)
    chat = lambda text: json.dumps(  # noqa: E731
        {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 4}
    ).encode()
    compact = (",", ":")
    ids = json.dumps(
        {"model": MODEL, "prompt": [1] * ((cap - 100) // 2), "max_tokens": 4}, separators=compact
    )
    return [
        (f"chat, {mb} MB", "/v1/chat/completions", chat(big), False),
        (f"completion, {mb} MB", "/v1/completions", json.dumps({"model": MODEL, "prompt": big}).encode(), False),
        (f"session env_id, {mb} MB", "/v1/sessions", json.dumps({"env_id": big}).encode(), False),
        (f"rollout job, {mb} MB", "/admin/rollouts", json.dumps({"env_id": big}).encode(), True),
        (f"weight upload, {mb} MB", "/admin/weights", b"\0" * (mb << 20), True),
        ("chat, just under the cap", "/v1/chat/completions", chat(under), False),
        ("token ids, just under the cap", "/v1/completions", ids.encode(), False),
    ]  # fmt: skip


async def _stall_row(
    client: httpx.AsyncClient, path: str, body: bytes | None, headers: dict[str, str]
) -> tuple[int | None, float, float, float]:
    """Send ``body`` (None: nothing, the baseline) while polling /health; return the
    answer's status, the slowest /health answer, and the server's two gauges: the longest
    loop lag and the most loop-thread CPU in one 10 ms sleep (ms)."""
    await asyncio.sleep(10.5)  # the gauges' window forgets what came before
    done = asyncio.Event()
    slowest = 0.0

    async def poll() -> None:
        nonlocal slowest
        while not done.is_set():
            started = time.perf_counter()
            await client.get("/health")
            slowest = max(slowest, time.perf_counter() - started)
            await asyncio.sleep(0.02)

    poller = asyncio.create_task(poll())
    status = None
    if body is None:
        await asyncio.sleep(2.0)
    else:
        answer = await client.post(path, content=body, headers=headers)
        status = answer.status_code
        await asyncio.sleep(0.5)
    done.set()
    await poller
    metrics = (await client.get("/metrics")).text
    lag = _gauge(metrics, "rollgym_event_loop_lag_max_seconds")
    busy = _gauge(metrics, "rollgym_event_loop_busy_max_seconds")
    return status, 1000 * slowest, 1000 * lag, 1000 * busy


def _gauge(metrics: str, name: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise LookupError(name)


async def _stall(server: ServerProcess, mb: int, cap: int, repeats: int) -> None:
    """Each row ``repeats`` times. On a shared machine the server process is descheduled
    at random, which shows as lag: the smallest lag of the runs is kept (a stall of the
    server's own comes back every time), and beside it the most CPU the loop thread spent
    in one 10 ms sleep over all runs (the server's own work, whatever the machine does)."""
    admin = {"Authorization": f"Bearer {server.admin_token}", "Content-Type": "application/json"}
    plain = {**AGENT, "Content-Type": "application/json"}
    cases = [("idle server (baseline)", "", None, False), *_bodies(mb, cap)]
    rows = []
    async with httpx.AsyncClient(base_url=server.url, timeout=300) as client:
        for what, path, body, is_admin in cases:
            runs = [
                await _stall_row(client, path, body, admin if is_admin else plain)
                for _ in range(repeats)
            ]
            lag, busy = min(r[2] for r in runs), max(r[3] for r in runs)
            rows.append((what, runs[0][0], min(r[1] for r in runs), lag, busy))
    print(f"\nevent-loop stall under big bodies (cap {cap} bytes; goal: under 50 ms)")
    print(f"{'body':<34}{'status':>7}{'slowest /health':>16}{'loop lag':>10}{'loop CPU':>10}  (ms)")
    for what, status, health_ms, lag, busy in rows:
        print(f"{what:<34}{status or '-':>7}{health_ms:>16.1f}{lag:>10.1f}{busy:>10.1f}")
    print(
        f"longest stall with a body: lag {max(r[3] for r in rows[1:]):.1f} ms, loop CPU "
        f"{max(r[4] for r in rows[1:]):.1f} ms (idle: {rows[0][3]:.1f}, {rows[0][4]:.1f} ms)"
    )


# --- weight updates under load --------------------------------------------------------------


async def updates_under_load(
    server: ServerProcess, model_dir: Path, updates: int, clients: int
) -> dict[str, Any]:
    """Push ``updates`` weight updates while ``clients`` loops generate; count outcomes."""
    weights = (model_dir / "model.safetensors").read_bytes()
    admin = {"Authorization": f"Bearer {server.admin_token}"}
    counts = {"requests": 0, "failed": 0, "mixed": 0}
    versions: set[int] = set()
    stop = asyncio.Event()

    async def generate(client: httpx.AsyncClient, seed: int) -> None:
        while not stop.is_set():
            body = {"model": MODEL, "prompt": [1, 2, 3, seed % 50 + 4], "max_tokens": 32,
                    "temperature": 1.0, "return_token_ids": True}  # fmt: skip
            answer = await client.post("/v1/completions", json=body)
            counts["requests"] += 1
            if answer.status_code != 200:
                counts["failed"] += 1
                counts["mixed"] += "spans policy versions" in answer.text
            else:
                versions.add(answer.json()["policy_version"])

    limits = httpx.Limits(max_connections=clients + 4)
    async with httpx.AsyncClient(
        base_url=server.url, headers=AGENT, timeout=300, limits=limits
    ) as client:
        start = (await client.get("/health")).json()["policy_version"]
        loops = [asyncio.create_task(generate(client, i)) for i in range(clients)]
        applied, durations = 0, []
        for _ in range(updates):
            await asyncio.sleep(0.3)
            version = (await client.get("/health")).json()["policy_version"]
            started = time.perf_counter()
            answer = await client.post(
                "/admin/weights",
                content=weights,
                headers={**admin, "X-Expected-Version": str(version)},
            )
            durations.append(time.perf_counter() - started)
            applied += answer.status_code == 200
        stop.set()
        await asyncio.gather(*loops)
        end = (await client.get("/health")).json()["policy_version"]
    return {**counts, "updates": applied, "versions": f"{start}..{end} ({len(versions)} seen)",
            "update_s": statistics.median(durations)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["stall", "updates"])
    parser.add_argument("--mb", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--out", type=Path, default=Path(".data/bench-robustness"))
    args = parser.parse_args()
    from rollgym.contract import paths

    model_dir = paths.default_model_dir()
    root = args.out.resolve()
    if args.what == "stall":
        with _server(root / "stall", model_dir) as server:
            cap = ServerSettings.model_fields["max_body_bytes"].default
            asyncio.run(_stall(server, args.mb, cap=cap, repeats=args.repeats))
        return
    rows = []
    for mode in ("finish", "abort"):
        with _server(root / mode, model_dir, ROLLGYM_ENGINE__IN_FLIGHT=mode) as server:
            rows.append(
                (
                    mode,
                    asyncio.run(updates_under_load(server, model_dir, args.updates, args.clients)),
                )
            )
    print(f"\nweight updates under {args.clients} concurrent generation loops (goal: 0 and 0)")
    print(
        f"{'mode':<8}{'updates':>8}{'requests':>9}{'failed':>7}{'mixed':>6}  versions           median update s"
    )
    for mode, r in rows:
        print(f"{mode:<8}{r['updates']:>8}{r['requests']:>9}{r['failed']:>7}{r['mixed']:>6}  "
              f"{r['versions']:<19}{r['update_s']:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
