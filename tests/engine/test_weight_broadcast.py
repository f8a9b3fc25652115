"""The weight broadcast's CPU twin, end to end: the trainer's sender (vLLM's NCCL sender,
gloo on the wire) against a real server whose vLLM workers receive through vLLM's NCCL
engine lifecycle over gloo (``engine.weight_transfer='gloo'``), over real HTTP.

What runs here is what a GPU host runs but the wire: the admin routes, the pause, vLLM's
``init_weight_transfer_engine`` / ``update_weights`` / layerwise reload, the version bump
and the canary. (The router's fan-out: tests/unit/test_cluster_control.py.)
"""

from __future__ import annotations

import asyncio
import time

import pytest
import torch
from engine_helpers import assert_close, hf_logprobs

from rollgym.engine.config import EngineConfig
from rollgym.run.loopback import on_loopback
from rollgym.run.server_process import free_port
from rollgym.server.app import create_app
from rollgym.server.config import ServerSettings
from rollgym.trainer.broadcast import WeightBroadcaster
from rollgym.trainer.canary import CanaryConfig
from rollgym.trainer.client import ServerClient
from rollgym.trainer.config import BroadcastConfig, ClientConfig
from rollgym.trainer.errors import VersionConflict
from rollgym.trainer.weights import WeightPusher

TOKEN = "engine-test-admin-token"
TOKENS = [5, 17, 200, 33, 9, 400, 12, 71, 8, 3]


def changed(default_model_dir, seed: int):
    """The default model with every weight nudged (seeded): what a training step makes."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(default_model_dir, dtype=torch.float32).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * p.std() * torch.randn(p.shape, generator=generator))
    return model


@pytest.fixture
def settings(tmp_path, default_model_dir) -> ServerSettings:
    engine = EngineConfig(
        model_dir=default_model_dir, max_model_len=512, kv_cache_gib=0.5, weight_transfer="gloo"
    )
    return ServerSettings(admin_token=TOKEN, data_dir=tmp_path / "data", engine=engine)


async def test_broadcast_pushes_are_served_at_their_versions_and_pass_the_canary(
    settings, default_model_dir
) -> None:
    models = [changed(default_model_dir, seed) for seed in (1, 2)]
    app = create_app(settings)
    async with on_loopback(app) as url:
        engine = app.state.services.engine
        before = await engine.score(TOKENS)

        def trainer() -> list:
            config = BroadcastConfig(backend="gloo", port=free_port(), timeout_s=120)
            with ServerClient(ClientConfig(url=url, admin_token=TOKEN)) as client:
                broadcast = WeightBroadcaster.open(client, config)
                pusher = WeightPusher(client, version=0, canary=CanaryConfig(), broadcast=broadcast)
                try:
                    return [pusher.push(model) for model in models]
                finally:
                    broadcast.close()

        syncs = await asyncio.to_thread(trainer)
        assert [s.policy_version for s in syncs] == [1, 2]
        assert engine.policy_version == 2
        for sync in syncs:
            assert sync.server is not None and sync.server.canary is not None
            assert sync.server.canary.passed, sync.server.canary
        served = await engine.score(TOKENS)
        assert_close(served, hf_logprobs(models[1], TOKENS[:1], TOKENS[1:]))
        assert max(abs(a - b) for a, b in zip(served, before, strict=True)) > 0.05


async def test_an_update_the_server_refuses_ends_the_broadcast_with_its_reason(
    settings, default_model_dir
) -> None:
    model = changed(default_model_dir, 3)
    app = create_app(settings)
    async with on_loopback(app) as url:
        engine = app.state.services.engine
        before = await engine.score(TOKENS)
        refused_after: list[float] = []

        def trainer():
            config = BroadcastConfig(backend="gloo", port=free_port(), timeout_s=120)
            with ServerClient(ClientConfig(url=url, admin_token=TOKEN)) as client:
                broadcast = WeightBroadcaster.open(client, config)
                pusher = WeightPusher(client, version=7, canary=None, broadcast=broadcast)
                started = time.monotonic()
                with pytest.raises(VersionConflict):  # the server is at 0, not 7
                    pusher.push(model)
                refused_after.append(time.monotonic() - started)
                assert engine.policy_version == 0
                pusher.version = 0  # the group outlives a refusal: the right push lands
                try:
                    return pusher.push(model)
                finally:
                    broadcast.close()

        sync = await asyncio.to_thread(trainer)
        assert refused_after[0] < 30  # the server's answer, not the group's 120 s timeout
        assert sync.policy_version == engine.policy_version == 1
        served = await engine.score(TOKENS)
        assert served != before
        assert_close(served, hf_logprobs(model, TOKENS[:1], TOKENS[1:]))
