"""The red team's inputs (issue 14), in-process: each gets a 4xx that names the problem, and
the server goes on serving. Their real twin is the schemathesis run in tests/e2e."""

from __future__ import annotations

import asyncio
import json
import math
import struct
from typing import Any

import gymnasium
import pytest
from server_fakes import ADMIN, engine_factory, in_process, safetensors_bytes, settings

from rollgym.engine.base import TensorSpec
from rollgym.engine.fake import FakeEngine
from rollgym.envs.core import ChatEnv
from rollgym.server.app import create_app

GUESS = "rollgym/GuessNumber-v0"
TOOL = "rollgym/GuessTool-v0"  # a second env id, for mixtures
MODEL = "rollgym-tiny"
NAN_ENV = "test/NanReward-v0"


class NanRewardEnv(ChatEnv[str, None]):
    """A user's env whose reward function returns NaN."""

    def __init__(self) -> None:
        super().__init__(step_reward=lambda outcome: math.nan)

    def _open(self, options: dict[str, Any]) -> Any:
        from rollgym.envs.core import Opening

        return Opening("t", ({"role": "user", "content": "Say anything."},))

    def _turn(self, action: str) -> Any:
        from rollgym.envs.core import Turn

        return Turn(messages=(), outcome=action, terminated=True)

    def _rejected(self, error: str) -> str:
        return error

    def _episode(self) -> None:
        return None


if NAN_ENV not in gymnasium.registry:
    gymnasium.register(NAN_ENV, entry_point=NanRewardEnv, max_episode_steps=2)


def job(**change: object) -> dict[str, object]:
    return {"env_id": GUESS, "group_size": 2, "sampling": {"max_tokens": 4}, **change}


def chat(**change: object) -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **change}


def nested_header() -> bytes:
    header = b"[" * 100_000 + b"]" * 100_000
    return struct.pack("<Q", len(header)) + header


def overlapping() -> bytes:
    header = json.dumps(
        {
            "model.embed_tokens.weight": {
                "dtype": "F32", "shape": [8, 4], "data_offsets": [0, 128],
            },
            "extra": {"dtype": "F32", "shape": [8, 4], "data_offsets": [64, 192]},
        }
    ).encode()  # fmt: skip
    return struct.pack("<Q", len(header)) + header + b"\0" * 192


# (method, path, json body or raw bytes, admin?, status, error code, a word of the message)
CASES: list[tuple[str, str, Any, bool, int, str, str]] = [
    ("POST", "/admin/rollouts", job(seeds=[]), True, 422, "invalid_request", "seeds"),
    ("POST", "/admin/rollouts", job(group_size=10**6), True, 422, "invalid_request", "group_size"),
    ("POST", "/admin/rollouts", job(sampling={"max_tokens": 10**12}), True, 422, "invalid_request", "max_tokens"),
    ("POST", "/admin/rollouts", b'{"env_id": "rollgym/GuessNumber-v0", "oversample": Infinity}', True, 422, "invalid_request", "finite"),
    ("POST", "/admin/rollouts", b'{"env_id": "x", "sampling": {"temperature": 1e400}}', True, 422, "invalid_request", "temperature"),
    ("POST", "/admin/rollouts", job(env_id="rollgym/Shell-v0"), True, 409, "not_enabled", "sandbox pool"),
    ("POST", "/admin/rollouts", job(env_kwargs={"low": 5, "high": 1}), True, 422, "bad_request", "low"),
    ("POST", "/admin/rollouts", job(env_kwargs={"low": {"deep": [1]}}), True, 422, "invalid_request", "env_kwargs"),
    ("POST", "/admin/rollouts", job(env_kwargs={"task_file": "/etc/passwd"}), True, 403, "env_not_allowed", "task_file"),
    ("POST", "/admin/rollouts", job(env_kwargs={"sandbox_pool": None}), True, 403, "env_not_allowed", "sandbox_pool"),
    ("POST", "/admin/rollouts", job(env_kwargs={"max_episode_steps": 0}), True, 403, "env_not_allowed", "max_turns"),
    ("POST", "/admin/rollouts", job(mixture=[{"env_id": TOOL, "env_kwargs": {"task_file": "/etc/passwd"}}]), True, 403, "env_not_allowed", "task_file"),
    ("POST", "/admin/rollouts", job(mixture=[{"env_id": TOOL, "weight": 0}]), True, 422, "invalid_request", "weight"),
    ("POST", "/admin/rollouts", job(mixture=[{"env_id": GUESS}]), True, 422, "invalid_request", "twice"),
    ("POST", "/admin/rollouts", job(env_id="x" * 300), True, 422, "invalid_request", "env_id"),
    ("POST", "/admin/rollouts", job(env_id="no_such_module_xyz:Env-v0"), True, 404, "not_found", "no_such_module_xyz"),
    ("POST", "/admin/rollouts", job(sampling={"max_tokens": 4000}), True, 422, "bad_request", "context"),
    ("POST", "/admin/weights/from-path", {"path": "/" + "a" * 5000}, True, 422, "invalid_request", "path"),
    ("POST", "/admin/weights/from-path", {"path": "/dev/null"}, True, 422, "bad_weights", "regular file"),
    ("POST", "/admin/weights/from-path", {"path": "/a\u0000b"}, True, 422, "invalid_request", "path"),
    ("POST", "/admin/weights", nested_header(), True, 422, "bad_weights", "not JSON"),
    ("POST", "/admin/weights", overlapping(), True, 422, "bad_weights", "overlaps"),
    ("POST", "/admin/weights/nccl/init", {"master_address": "a", "master_port": 1, "world_size": 2}, True, 409, "not_enabled", "NCCL"),
    ("POST", "/v1/sessions", {"env_id": GUESS, "env_kwargs": {"low": 5, "high": 1}}, False, 422, "bad_request", "low"),
    ("POST", "/v1/sessions", {"env_id": GUESS, "env_kwargs": {"task_file": "/etc/passwd"}}, False, 403, "env_not_allowed", "task_file"),
    ("POST", "/v1/sessions", {"env_id": GUESS, "env_kwargs": {"max_episode_steps": 0}}, False, 403, "env_not_allowed", "max_episode_steps"),
    ("POST", "/v1/sessions", {"env_id": "rollgym/PythonTests-v0", "env_kwargs": {"sandbox_pool": None}}, False, 403, "env_not_allowed", "sandbox_pool"),
    ("POST", "/v1/sessions", {"env_id": "os:Env-v0"}, False, 403, "env_not_allowed", "module"),
    ("POST", "/v1/sessions", {"env_id": "rollgym/PythonTests-v0", "env_kwargs": {"test_timeout_s": 9}}, False, 403, "env_not_allowed", "test_timeout_s"),
    ("POST", "/v1/sessions", {"env_id": GUESS, "seed": -1}, False, 422, "invalid_request", "seed"),
    ("POST", "/v1/sessions", b'{"env_id": "a", "env_kwargs": {"\\ud800": 1}}', False, 422, "invalid_request", "env_kwargs"),
    ("POST", "/v1/sessions/x/step", b'{"action": "\\ud800"}', False, 422, "invalid_request", "action"),
    ("POST", "/v1/chat/completions", chat(messages=[{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": 3}}]}]), False, 422, "invalid_request", "tool_calls"),
    ("POST", "/v1/chat/completions", b'{"model": "m", "messages": [{"role": "user", "content": "\\ud800"}]}', False, 422, "invalid_request", "content"),
    ("POST", "/v1/chat/completions", b'{"model": "m", "messages": [], "temperature": Infinity}', False, 422, "invalid_request", "temperature"),
    ("POST", "/v1/chat/completions", chat(messages=[{"role": "user", "content": "x" * 200_000}]), False, 422, "bad_request", "context"),
    ("POST", "/v1/completions", {"model": MODEL, "prompt": [10**9]}, False, 422, "bad_request", "vocabulary"),
    ("POST", "/v1/completions", {"model": MODEL, "prompt": [-1]}, False, 422, "invalid_request", "prompt"),
]  # fmt: skip


@pytest.mark.parametrize(("method", "path", "body", "admin", "status", "code", "word"), CASES)
async def test_a_hostile_input_gets_a_4xx_that_names_it(
    client, engine, method, path, body, admin, status, code, word
) -> None:
    headers = ADMIN if admin else {}
    if isinstance(body, bytes):  # raw: JSON a client library would refuse to write, or weights
        if path != "/admin/weights":
            headers = {**headers, "Content-Type": "application/json"}
        answer = await client.request(method, path, content=body, headers=headers)
    else:
        answer = await client.request(method, path, json=body, headers=headers)
    assert (answer.status_code, answer.json()["error"]) == (status, code), answer.text
    assert word in answer.json()["message"]
    assert engine.policy_version == 0  # nothing was applied
    assert (await client.get("/health")).status_code == 200  # and the server goes on


async def test_a_bad_job_leaves_the_running_one_running(client) -> None:
    started = await client.post("/admin/rollouts", json=job(), headers=ADMIN)
    assert started.json()["running"]
    refused = await client.post("/admin/rollouts", json=job(group_size=10**6), headers=ADMIN)
    assert refused.status_code == 422
    refused = await client.post(
        "/admin/rollouts", json=job(env_kwargs={"low": 5, "high": 1}), headers=ADMIN
    )
    assert refused.status_code == 422
    status = (await client.get("/admin/rollouts", headers=ADMIN)).json()
    assert status["running"] and status["job"]["env_kwargs"] == {}


async def test_a_body_over_the_cap_is_refused_as_it_streams(client, engine) -> None:
    big = json.dumps(chat(messages=[{"role": "user", "content": "x" * (10 << 20)}])).encode()

    async def stream():  # no Content-Length: the cap holds while the body streams
        for start in range(0, len(big), 1 << 16):
            yield big[start : start + (1 << 16)]

    for content in (big, stream()):
        answer = await client.post("/v1/chat/completions", content=content)
        assert answer.status_code == 413 and answer.json()["error"] == "request_too_large"
    assert engine.prompts == []  # nothing reached the engine


async def test_a_weight_upload_is_exempt_from_the_body_cap(tmp_path, codec) -> None:
    manifest = {"model.embed_tokens.weight": TensorSpec("F32", (64, 16))}
    engine = FakeEngine(lambda prompt: [codec.eos_id], manifest=manifest)
    app = create_app(settings(tmp_path, max_body_bytes=1024), engine_factory=engine_factory(engine))
    async with in_process(app) as client:
        weights = safetensors_bytes(shape=(64, 16))
        answer = await client.post("/admin/weights", content=weights, headers=ADMIN)
        assert len(weights) > 1024 and answer.status_code == 200
        chat_answer = await client.post(
            "/v1/chat/completions",
            json=chat(messages=[{"role": "user", "content": "x" * 2000}]),
        )
        assert chat_answer.status_code == 413


async def test_an_unexpected_failure_is_answered_with_the_error_body(tmp_path, codec) -> None:
    def broken(prompt: object) -> list[int]:
        raise RuntimeError("a bug")

    engine = FakeEngine(broken)
    app = create_app(settings(tmp_path), engine_factory=engine_factory(engine))
    async with in_process(app) as client:
        answer = await client.post("/v1/chat/completions", json=chat())
        assert answer.status_code == 500
        assert answer.json()["error"] == "server_error" and "a bug" in answer.json()["message"]
        assert (await client.get("/health")).status_code == 200


async def test_a_nan_reward_never_poisons_the_buffer(client) -> None:
    started = await client.post(
        "/admin/rollouts",
        json={"env_id": NAN_ENV, "group_size": 2, "sampling": {"max_tokens": 4}},
        headers=ADMIN,
    )
    assert started.status_code == 200, started.text
    for _ in range(100):
        status = (await client.get("/admin/rollouts", headers=ADMIN)).json()
        if status["invalid_trajectories"] >= 2:
            break
        await asyncio.sleep(0.02)
    assert status["invalid_trajectories"] >= 2 and status["completed_groups"] == 0
    pulled = await client.post(
        "/admin/buffer/pull",
        json={"trainer_version": 0, "max_staleness": 0, "num_groups": 1, "timeout_s": 0},
        headers=ADMIN,
    )
    assert pulled.status_code == 200 and pulled.json()["groups"] == []
