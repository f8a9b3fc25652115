"""Clients that leave early, on the real vLLM engine behind a real uvicorn: their requests
are aborted in vLLM, and their key is charged the tokens vLLM had sampled, no more.
(The unit twin: tests/unit/test_server_disconnect.py.)"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from rollgym.engine.config import EngineConfig
from rollgym.run.loopback import on_loopback
from rollgym.server.access.agent_keys import AgentKeysConfig
from rollgym.server.app import create_app
from rollgym.server.config import ServerSettings

AGENT, KEY = "engine-test-agent", "engine-test-agent-key"
CLIENTS, MAX_TOKENS = 4, 1500
# Greedy, the default model answers this with all 1500 tokens (no end of text: checked with
# transformers' generate), seconds of work; sampled, it may end in a few dozen tokens, before
# the client leaves, and then there is nothing to abort.
ASK = [{"role": "user", "content": "Count to a thousand."}]


async def wait_until(predicate, timeout: float = 60.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.05)


async def leave_early(client: httpx.AsyncClient, seed: int) -> None:
    body = {
        "model": "rollgym-tiny",
        "messages": ASK,
        "max_tokens": MAX_TOKENS,
        "temperature": 0.0,
        "seed": seed,
    }
    with pytest.raises(httpx.ReadTimeout):  # the answer takes longer than the client waits
        await client.post("/v1/chat/completions", json=body, timeout=0.5)


async def test_clients_that_leave_abort_their_requests_and_pay_for_what_ran(
    tmp_path, default_model_dir, monkeypatch
) -> None:
    engine = EngineConfig(model_dir=default_model_dir, max_model_len=2048, kv_cache_gib=0.5)
    settings = ServerSettings(
        admin_token="engine-test-admin-token",
        data_dir=tmp_path / "data",
        engine=engine,
        agents=AgentKeysConfig(keys={AGENT: KEY}),
    )
    app = create_app(settings)
    async with on_loopback(app) as url:
        services = app.state.services
        vllm = services.engine.llm
        aborted: list[str] = []
        abort = vllm.abort

        async def watched_abort(request_id, internal=False) -> None:
            aborted.append(request_id)
            await abort(request_id, internal)

        monkeypatch.setattr(vllm, "abort", watched_abort)
        headers = {"Authorization": f"Bearer {KEY}"}
        async with httpx.AsyncClient(base_url=url, headers=headers) as client:
            await asyncio.gather(*(leave_early(client, seed) for seed in range(CLIENTS)))
        await wait_until(lambda: len(aborted) == CLIENTS)
        await wait_until(lambda: not vllm.output_processor.has_unfinished_requests())
        # each key is charged what vLLM had sampled when it stopped: some, not the budget
        assert 0 < services.quotas.tokens_used(AGENT) < CLIENTS * MAX_TOKENS
