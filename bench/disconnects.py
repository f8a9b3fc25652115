"""Clients that leave early: how long the engine stays busy after they are gone (issue 37).

    .venv/bin/python -m bench.disconnects [--clients 12] [--leave-after 0.5] [--max-tokens 512]

One app in this process (vLLM engine on the default model) on uvicorn over loopback,
warmed by one call. Two rounds of ``--clients`` concurrent chat calls of ``--max-tokens``
(temperature 1, one seed each, the same both rounds):

1. **stay** (the baseline): the clients wait for their answers; the engine is busy until
   the last one is done (what clients that left kept it busy for, before it stopped).
2. **leave**: each client gives up after ``--leave-after`` s (its read timeout); how long
   the engine still had requests once they had all left, and the tokens charged to the key.

On a 2-core machine the figures move with other load: compare within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import httpx

from rollgym.contract.paths import default_model_dir
from rollgym.engine.config import EngineConfig
from rollgym.run.loopback import on_loopback
from rollgym.server.access.agent_keys import AgentKeysConfig
from rollgym.server.app import create_app
from rollgym.server.config import ServerSettings

AGENT, KEY = "bench-agent", "bench-agent-key-000000"  # a bench has no secrets
ASK = [{"role": "user", "content": "Count to a thousand."}]


async def call(client: httpx.AsyncClient, seed: int, max_tokens: int, timeout: float) -> int:
    """The tokens the answer had (0 when the client left before it came)."""
    body = {"model": "rollgym-tiny", "messages": ASK, "max_tokens": max_tokens, "seed": seed}
    try:
        answer = await client.post("/v1/chat/completions", json={**body, "temperature": 1.0},
                                   timeout=timeout)  # fmt: skip
    except httpx.ReadTimeout:
        return 0
    return int(answer.json()["usage"]["completion_tokens"])


async def run(args: argparse.Namespace) -> None:
    engine = EngineConfig(model_dir=default_model_dir(), max_model_len=2048, kv_cache_gib=0.5)
    settings = ServerSettings(
        admin_token="bench-admin-token-000000",
        data_dir=Path(tempfile.mkdtemp(prefix="bench-disconnects-")),
        engine=engine,
        agents=AgentKeysConfig(keys={AGENT: KEY}),
    )
    app = create_app(settings)
    async with on_loopback(app) as url:
        services = app.state.services
        busy = services.engine.llm.output_processor.has_unfinished_requests
        headers = {"Authorization": f"Bearer {KEY}"}
        async with httpx.AsyncClient(base_url=url, headers=headers) as client:
            await call(client, 0, 8, 300)  # warm-up
            seeds = range(args.clients)
            started = time.perf_counter()
            stayed = await asyncio.gather(*(call(client, s, args.max_tokens, 300) for s in seeds))
            stay_s = time.perf_counter() - started
            before = services.quotas.tokens_used(AGENT)
            await asyncio.gather(
                *(call(client, s, args.max_tokens, args.leave_after) for s in seeds)
            )
            left = time.perf_counter()
            while busy():  # noqa: ASYNC110 (vLLM offers no event for it)
                await asyncio.sleep(0.005)
            after_s = time.perf_counter() - left
        charged = services.quotas.tokens_used(AGENT) - before
    print(
        f"{args.clients} clients, max_tokens {args.max_tokens}, leaving after {args.leave_after} s"
    )
    print(f"stay:  engine busy {stay_s:.2f} s for {sum(stayed)} tokens (all answered)")
    print(
        f"leave: engine busy {after_s:.3f} s after the clients left; "
        f"{charged} tokens charged (sampled before the aborts)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=12)
    parser.add_argument("--leave-after", type=float, default=0.5)
    parser.add_argument("--max-tokens", type=int, default=512)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
