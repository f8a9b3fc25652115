"""The archive on the real engine: trained groups survive a restart, and the exporter reads
them (from the data dir and over HTTP) into a data set that loads back."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI

from rollgym.contract.archive import ArchivePage
from rollgym.data.curate import CurateConfig, curate
from rollgym.data.export import write_export
from rollgym.data.sources import from_data_dir
from rollgym.engine.config import EngineConfig
from rollgym.server.app import create_app
from rollgym.server.config import ServerSettings

TOKEN = "engine-test-admin-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
JOB = {
    "env_id": "rollgym/GuessNumber-v0",
    "env_kwargs": {"low": 1, "high": 8},
    "group_size": 2,
    "groups_per_batch": 2,
    "max_turns": 2,
    "sampling": {"temperature": 1.0, "max_tokens": 8},
    "drop_zero_variance": False,
}


@contextlib.asynccontextmanager
async def serving(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://server") as client:
            yield client


@pytest.fixture
def settings(tmp_path, default_model_dir) -> ServerSettings:
    engine = EngineConfig(model_dir=default_model_dir, max_model_len=512, kv_cache_gib=0.5)
    return ServerSettings(admin_token=TOKEN, data_dir=tmp_path / "data", engine=engine)


async def test_trained_groups_survive_a_restart_and_export(settings, tmp_path) -> None:
    from datasets import load_from_disk

    async with serving(create_app(settings)) as client:
        await client.post("/admin/rollouts", json=JOB, headers=ADMIN)
        pull = {"trainer_version": 0, "max_staleness": 1, "num_groups": 2, "timeout_s": 300}
        pulled = (await client.post("/admin/buffer/pull", json=pull, headers=ADMIN)).json()
        await client.delete("/admin/rollouts", headers=ADMIN)
        ids = [g["group_id"] for g in pulled["groups"]]
        acked = await client.post("/admin/buffer/ack", json={"group_ids": ids}, headers=ADMIN)
        assert acked.json() == {"acked": 2}
    sampled = {t["id"]: t for g in pulled["groups"] for t in g["trajectories"]}

    async with serving(create_app(settings)) as client:  # a new server on the same data dir
        answer = await client.get("/admin/archive", params={"limit": 100}, headers=ADMIN)
    page = ArchivePage.model_validate(answer.json())
    archived = {t.id: t for item in page.items for t in item.group.trajectories}
    assert archived.keys() == sampled.keys()
    assert {item.outcome for item in page.items} == {"trained"}
    for trajectory_id, trajectory in archived.items():
        assert trajectory.completion_ids == sampled[trajectory_id]["completion_ids"]
        assert trajectory.messages[0].role == "system" and len(trajectory.messages) >= 3

    no_dedup = CurateConfig(exact_dedup=False, near_dedup=False)
    rows, report = curate(from_data_dir(settings.data_dir), no_dedup)
    write_export(rows, tmp_path / "out", report=report)
    loaded = load_from_disk(str(tmp_path / "out" / "dataset"))
    assert sorted(loaded["id"]) == sorted(sampled)
    first = loaded[0]
    assert first["completion_ids"] == archived[first["id"]].completion_ids
    assert first["env_id"] == "rollgym/GuessNumber-v0" and first["outcome"] == "trained"
    assert first["messages"][2]["role"] == "assistant"
