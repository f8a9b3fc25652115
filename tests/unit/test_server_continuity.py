"""A restarted server resumes: the last applied weights at their version, the rollout job;
what a kill cut off is cleared. (The real twin: the kill -9 tests in tests/e2e.)"""

from __future__ import annotations

import pytest
from server_fakes import ADMIN, engine_factory, in_process, safetensors_bytes, settings

from rollgym.engine.base import StagedWeights
from rollgym.engine.fake import FakeEngine
from rollgym.engine.weights.store import PolicyStore
from rollgym.server.app import create_app
from rollgym.server.conversation.codec import ChatCodec

JOB = {"env_id": "rollgym/GuessNumber-v0", "group_size": 2, "sampling": {"max_tokens": 4}}


@pytest.fixture(scope="module")
def codec(default_model_dir) -> ChatCodec:
    return ChatCodec.from_model_dir(default_model_dir)


def server(tmp_path, codec):
    engine = FakeEngine(lambda prompt: [*codec.encode("5"), codec.eos_id])
    return engine, create_app(settings(tmp_path), engine_factory=engine_factory(engine))


async def test_the_last_applied_weights_come_back_at_their_version(tmp_path, codec) -> None:
    engine, app = server(tmp_path, codec)
    async with in_process(app) as client:
        for expected in (0, 1):
            answer = await client.post(
                "/admin/weights",
                content=safetensors_bytes(),
                headers={**ADMIN, "X-Expected-Version": str(expected)},
            )
            assert answer.status_code == 200
    served = engine.swapped[-1]

    engine, app = server(tmp_path, codec)
    async with in_process(app) as client:
        assert (await client.get("/health")).json()["policy_version"] == 2
        [restored] = engine.swapped
        assert isinstance(restored, StagedWeights) and restored.files == served.files
        assert restored.files[0].read_bytes() == safetensors_bytes()
        again = await client.post(
            "/admin/weights",
            content=safetensors_bytes(),
            headers={**ADMIN, "X-Expected-Version": "2"},
        )
        assert again.json()["policy_version"] == 3


async def test_a_fresh_data_dir_starts_at_version_zero(tmp_path, codec) -> None:
    engine, app = server(tmp_path, codec)
    async with in_process(app) as client:
        assert (await client.get("/health")).json()["policy_version"] == 0
    assert engine.swapped == []


async def test_what_a_kill_cut_off_is_removed_at_start(tmp_path, codec) -> None:
    data = tmp_path / "data"
    (data / "staging").mkdir(parents=True)
    (data / "staging" / "upload-cut.safetensors").write_bytes(b"half an upload")
    candidate = data / "policy" / ("a" * 32)
    candidate.mkdir(parents=True)
    (candidate / "model.safetensors").write_bytes(b"never applied")
    _, app = server(tmp_path, codec)
    async with in_process(app):
        assert list((data / "staging").glob("*")) == []
        assert not candidate.exists() and PolicyStore(data / "policy").load() is None


async def test_the_rollout_job_resumes_until_it_is_stopped(tmp_path, codec) -> None:
    _, app = server(tmp_path, codec)
    async with in_process(app) as client:
        started = await client.post("/admin/rollouts", json=JOB, headers=ADMIN)
        assert started.json()["running"]

    _, app = server(tmp_path, codec)
    async with in_process(app) as client:
        status = (await client.get("/admin/rollouts", headers=ADMIN)).json()
        assert status["running"] and status["job"]["env_id"] == JOB["env_id"]
        await client.delete("/admin/rollouts", headers=ADMIN)

    _, app = server(tmp_path, codec)
    async with in_process(app) as client:
        assert not (await client.get("/admin/rollouts", headers=ADMIN)).json()["running"]
