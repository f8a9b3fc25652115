"""``POST /admin/evaluations`` on the app with a fake engine that always guesses 5
(tests/unit/conftest.py): one group per seed, nothing filtered or stored, beside a running
rollout job (the real twin: tests/e2e/test_eval_e2e.py)."""

from __future__ import annotations

import pytest
from server_fakes import ADMIN

GUESS = "rollgym/GuessNumber-v0"


def request(**changes: object) -> dict[str, object]:
    # targets 5 or 6 and a model that always says 5: some episodes win, some lose
    body = {"env_id": GUESS, "env_kwargs": {"low": 5, "high": 6}, "seeds": [3, 1, 2, 4]}
    return {**body, "samples": 2, "max_turns": 2, **changes}


async def test_one_group_per_seed_in_order_and_nothing_stored(client) -> None:
    answer = await client.post("/admin/evaluations", json=request(), headers=ADMIN)
    assert answer.status_code == 200, answer.text
    result = answer.json()
    assert result["policy_version"] == 0
    assert [g["task_seed"] for g in result["groups"]] == [3, 1, 2, 4]
    assert all(len(g["trajectories"]) == 2 for g in result["groups"])
    # every episode played as it came, the losing ones too (nothing filtered)
    rewards = {t["reward"] for g in result["groups"] for t in g["trajectories"]}
    assert rewards == {0.0, 1.0}
    pull = {"trainer_version": 0, "max_staleness": 0, "num_groups": 1, "timeout_s": 0}
    pulled = await client.post("/admin/buffer/pull", json=pull, headers=ADMIN)
    assert pulled.json()["groups"] == []  # evaluation seeds never reach the trainer


async def test_it_runs_beside_a_rollout_job(client) -> None:
    job = {"env_id": GUESS, "env_kwargs": {"low": 5, "high": 5}, "group_size": 2}
    assert (await client.post("/admin/rollouts", json=job, headers=ADMIN)).status_code == 200
    answer = await client.post("/admin/evaluations", json=request(seeds=[7]), headers=ADMIN)
    assert answer.status_code == 200
    status = (await client.get("/admin/rollouts", headers=ADMIN)).json()
    assert status["running"] and status["job"]["env_kwargs"] == {"low": 5, "high": 5}


@pytest.mark.parametrize(
    ("changes", "status", "code"),
    [
        ({"env_id": "rollgym/NoSuchEnv-v0"}, 404, "not_found"),
        ({"seeds": list(range(100)), "samples": 64}, 422, "invalid_request"),
        ({"seeds": []}, 422, "invalid_request"),
        ({"env_kwargs": {"low": 5, "high": 1}}, 422, "bad_request"),
    ],
)
async def test_bad_requests_are_4xx(client, changes, status, code) -> None:
    answer = await client.post("/admin/evaluations", json=request(**changes), headers=ADMIN)
    assert (answer.status_code, answer.json()["error"]) == (status, code)


async def test_agents_cannot_evaluate(client) -> None:
    answer = await client.post("/admin/evaluations", json=request())
    assert answer.status_code == 401
