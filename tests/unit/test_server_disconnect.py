"""A client that leaves before its answer stops its generation (the engine-tier twin,
tests/engine/test_abandoned_generation.py, checks vLLM's abort and the charge)."""

from __future__ import annotations

import httpx
import pytest
from server_fakes import ADMIN, AGENT_KEY, engine_factory, settings, wait_for

from rollgym.contract.wire import PullResponse
from rollgym.engine.fake import FakeEngine
from rollgym.run.loopback import on_loopback
from rollgym.server.app import create_app

MODEL = "rollgym-tiny"
ASK = [{"role": "user", "content": "Guess a number."}]
CALLS = {
    "chat": ("/v1/chat/completions", {"model": MODEL, "messages": ASK}),
    "chat, streamed": ("/v1/chat/completions", {"model": MODEL, "messages": ASK, "stream": True}),
    "responses": ("/v1/responses", {"model": MODEL, "input": ASK}),
    "responses, streamed": ("/v1/responses", {"model": MODEL, "input": ASK, "stream": True}),
    "completions": ("/v1/completions", {"model": MODEL, "prompt": "Guess"}),
}
AUTH = {"Authorization": f"Bearer {AGENT_KEY}"}


@pytest.fixture
def engine(codec) -> FakeEngine:
    """Every reply is "5", after a minute: only a client that waits gets it."""
    return FakeEngine(lambda prompt: [*codec.encode("5"), codec.eos_id], latency_s=60.0)


@pytest.mark.parametrize("call", list(CALLS))
async def test_a_client_that_leaves_stops_its_generation(tmp_path, engine, call) -> None:
    path, body = CALLS[call]
    app = create_app(settings(tmp_path), engine_factory=engine_factory(engine))
    async with on_loopback(app) as url, httpx.AsyncClient(base_url=url, headers=AUTH) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.post(path, json=body, timeout=0.5)
        await wait_for(lambda: engine.abandoned == 1)


async def test_a_turn_whose_client_left_is_not_recorded(tmp_path, engine, codec) -> None:
    app = create_app(settings(tmp_path), engine_factory=engine_factory(engine))
    async with on_loopback(app) as url, httpx.AsyncClient(base_url=url, headers=AUTH) as client:
        create = {"env_id": "rollgym/GuessNumber-v0", "env_kwargs": {"low": 5, "high": 5}}
        made = (await client.post("/v1/sessions", json=create)).json()
        call = {"model": MODEL, "messages": made["observation"]}
        header = {"X-Rollgym-Session": made["session_id"]}
        with pytest.raises(httpx.ReadTimeout):
            await client.post("/v1/chat/completions", json=call, headers=header, timeout=0.5)
        await wait_for(lambda: engine.abandoned == 1)
        engine.latency_s = 0.0
        again = await client.post("/v1/chat/completions", json=call, headers=header)
        assert again.status_code == 200, again.text  # the same call: the cut turn left nothing
        await client.post(f"/v1/sessions/{made['session_id']}/step", json={"model_answer": True})
        assert (await client.delete(f"/v1/sessions/{made['session_id']}")).json()["persisted"]
        pull = {"trainer_version": 0, "max_staleness": 0, "num_groups": 1, "timeout_s": 0}
        pulled = await client.post("/admin/buffer/pull", json=pull, headers=ADMIN)
    [group] = PullResponse.model_validate(pulled.json()).groups
    [trajectory] = group.trajectories
    assert len(trajectory.turns) == 1
    assert trajectory.completion_ids == [*codec.encode("5"), codec.eos_id]
