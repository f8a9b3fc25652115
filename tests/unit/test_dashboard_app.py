"""The dashboard's routes in-process on a scripted engine (real twin: tests/e2e browser test)."""

from __future__ import annotations

import asyncio
import time

import pytest
from server_fakes import ADMIN, engine_factory, guessing_script, in_process, settings

from rollgym.contract.dashboard import DashboardData, TrainerReport
from rollgym.engine.fake import FakeEngine
from rollgym.server.app import create_app
from rollgym.server.config import DashboardConfig
from rollgym.server.conversation.codec import ChatCodec

GUESS = "rollgym/GuessNumber-v0"


@pytest.fixture(scope="module")
def codec(default_model_dir) -> ChatCodec:
    return ChatCodec.from_model_dir(default_model_dir)


@pytest.fixture
async def client(tmp_path, codec):
    engine = FakeEngine(guessing_script(codec), latency_s=0.01)
    fast = DashboardConfig(interval_s=0.05)
    app = create_app(settings(tmp_path, dashboard=fast), engine_factory=engine_factory(engine))
    async with in_process(app) as client:
        yield client


async def _data(client) -> DashboardData:
    answer = await client.get("/dashboard/data", params={"buckets": 10})
    assert answer.status_code == 200
    return DashboardData.model_validate(answer.json())


async def test_the_page_and_its_assets_are_served(client) -> None:
    page = await client.get("/dashboard")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'id="policy-version"' in page.text and "/dashboard/dashboard.js" in page.text
    script = await client.get("/dashboard/dashboard.js")
    assert script.status_code == 200 and "/dashboard/data" in script.text
    assert (await client.get("/dashboard/dashboard.css")).status_code == 200
    missing = await client.get("/dashboard/secrets.txt")
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"


async def test_a_fresh_server_has_empty_but_well_formed_data(client) -> None:
    data = await _data(client)
    assert data.policy_version == 0 and data.trainer_step is None
    assert set(data.stages.busy) == {"sampling", "environment", "buffer", "training"}
    assert all(len(v) == 10 for v in data.stages.busy.values())
    assert data.version_lag == [] and data.rewards == []


async def test_rollouts_pulls_and_trainer_reports_fill_every_panel(client) -> None:
    job = {"env_id": GUESS, "group_size": 4, "groups_per_batch": 2, "max_turns": 3}
    assert (await client.post("/admin/rollouts", json=job, headers=ADMIN)).status_code == 200
    pull = {"trainer_version": 0, "max_staleness": 1, "num_groups": 2, "timeout_s": 20}
    pulled = (await client.post("/admin/buffer/pull", json=pull, headers=ADMIN)).json()
    trajectories = sum(len(g["trajectories"]) for g in pulled["groups"])
    assert trajectories > 0
    started = (await _data(client)).started_at
    busy = (started, started + (time.time() - started) / 2)  # inside the server's lifetime
    alarms = {"kl_behaviour": 0.004, "entropy": 0.61}
    report = TrainerReport(
        step=1, at=time.time(), policy_version=0, busy_spans=[busy], alarms=alarms,
        trajectories=trajectories,
    )  # fmt: skip
    accepted = await client.post(
        "/admin/dashboard/trainer", json=report.model_dump(), headers=ADMIN
    )
    answer = accepted.json()
    assert (answer["step"], answer["spans"]) == (1, 1)
    # the cost board with the step's samples counted (the trainer's trackers log it)
    assert answer["cost"]["trained_samples"] == trajectories
    assert answer["cost"]["machine_s_per_trained_sample"] > 0
    await client.delete("/admin/rollouts", headers=ADMIN)
    for _ in range(200):  # until a reading (every 0.05 s) has seen all pulled trajectories
        data = await _data(client)
        if data.series.t and data.series.trajectories[-1] >= trajectories:
            break
        await asyncio.sleep(0.05)
    assert data.trainer_step == 1 and data.trainer_version == 0
    assert [(a.step, a.metrics) for a in data.alarms] == [(1, alarms)]
    totals = data.stages.totals
    assert totals["sampling"].busy_s > 0 and totals["buffer"].busy_s > 0
    assert totals["training"].busy_s == pytest.approx(busy[1] - busy[0])
    assert dict(data.version_lag) == {0: trajectories}
    assert data.rewards and data.rewards[0].policy_version == 0
    assert data.latency["model"].count > 0 and data.latency["model"].p50 is not None
    assert data.series.trajectories[-1] >= trajectories


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"step": 1, "at": 1.0, "policy_version": 0, "loss": 1.0}, "loss"),
        ({"step": 1, "at": 1.0, "policy_version": 0, "busy_spans": [[5, 4]]}, "ends before"),
        ({"step": -1, "at": 1.0, "policy_version": 0}, "step"),
    ],
)
async def test_bad_trainer_reports_get_a_422(client, body, problem) -> None:
    answer = await client.post("/admin/dashboard/trainer", json=body, headers=ADMIN)
    assert answer.status_code == 422 and problem in answer.json()["message"]


async def test_trainer_reports_need_the_admin_token(client) -> None:
    body = {"step": 1, "at": 1.0, "policy_version": 0}
    assert (await client.post("/admin/dashboard/trainer", json=body)).status_code == 401
