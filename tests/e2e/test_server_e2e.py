"""The real server: ``rollgym serve`` (uvicorn on loopback, vLLM, SQLite, Docker sandboxes).

One server process for the module (a short lease timeout, a pool of two sandboxes); the
restart test kills it with SIGKILL and starts it again on the same data dir.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import torch

from rollgym.contract.wire import PullResponse, RolloutStatus, Trajectory, TrajectoryGroup
from rollgym.server.conversation.codec import ChatCodec

TOKEN = "e2e-admin-token-0123456789"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
AGENT_KEY = "e2e-agent-key-0123456789"
AGENT = {"Authorization": f"Bearer {AGENT_KEY}"}
THRIFTY_KEY = "e2e-thrifty-key-0123456789"  # an agent with a quota of 500 tokens a minute
MODEL = "rollgym-tiny"
LEASE_S = 3.0


class ServerProcess:
    """``rollgym serve`` in a child process, on a free loopback port."""

    def __init__(self, data_dir: Path, log: Path):
        self.data_dir, self.log = data_dir, log
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 240.0) -> None:
        env = {
            **os.environ,
            "ROLLGYM_ADMIN_TOKEN": TOKEN,
            "ROLLGYM_AGENTS__KEYS": json.dumps({"e2e": AGENT_KEY, "thrifty": THRIFTY_KEY}),
            "ROLLGYM_AGENTS__QUOTAS": json.dumps({"thrifty": {"tokens_per_minute": 500}}),
            "ROLLGYM_BUFFER__LEASE_TIMEOUT_S": str(LEASE_S),
            "ROLLGYM_ENGINE__MAX_MODEL_LEN": "1024",
            "ROLLGYM_SANDBOXES__POOL_SIZE": "2",
        }
        rollgym = [sys.executable, "-m", "rollgym.cli", "serve"]
        args = ["--port", str(self.port), "--data-dir", str(self.data_dir)]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [*rollgym, *args],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: the engine core included
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"the server exited: see {self.log}\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        pytest.fail(f"the server did not answer in {timeout_s} s: see {self.log}")

    def kill(self) -> None:
        """A crash: SIGKILL to the server and its engine process, no shutdown handlers."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(30)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory, docker_client) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("server")
    process = ServerProcess(root / "data", root / "server.log")
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def admin(server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, headers=ADMIN, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def codec(default_model_dir) -> ChatCodec:
    return ChatCodec.from_model_dir(default_model_dir)


def pull_all(
    admin: httpx.Client, groups: int, version: int = 0, timeout: float = 60
) -> PullResponse:
    body = {
        "trainer_version": version,
        "max_staleness": 4,
        "num_groups": groups,
        "timeout_s": timeout,
    }
    answer = admin.post("/admin/buffer/pull", json=body)
    assert answer.status_code == 200, answer.text
    return PullResponse.model_validate(answer.json())


def run_job(admin: httpx.Client, job: dict[str, object], groups: int) -> list[TrajectoryGroup]:
    started = admin.post("/admin/rollouts", json=job)
    assert started.status_code == 200, started.text
    response = pull_all(admin, groups, timeout=180)
    status = RolloutStatus.model_validate(admin.delete("/admin/rollouts").json())
    assert status.error is None, status.error
    assert len(response.groups) == groups
    assert admin.post(
        "/admin/buffer/ack", json={"group_ids": [g.group_id for g in response.groups]}
    ).json() == {"acked": groups}
    # drain what the job made besides, so later tests start from an empty buffer
    rest = pull_all(admin, 64, timeout=0)
    admin.post("/admin/buffer/ack", json={"group_ids": [g.group_id for g in rest.groups]})
    return response.groups


def check_token_faithful(trajectory: Trajectory, codec: ChatCodec) -> None:
    assert trajectory.valid, trajectory.invalid_reason
    n = len(trajectory.completion_ids)
    assert len(trajectory.logprobs) == len(trajectory.loss_mask) == n
    model = [lp for lp, m in zip(trajectory.logprobs, trajectory.loss_mask, strict=True) if m]
    env = [lp for lp, m in zip(trajectory.logprobs, trajectory.loss_mask, strict=True) if not m]
    assert all(lp <= 0.0 for lp in model) and any(lp < 0.0 for lp in model)
    assert all(lp == 0.0 for lp in env)
    assert sum(t.completion_tokens for t in trajectory.turns) == len(model)
    assert sum(t.env_tokens for t in trajectory.turns) == len(env)
    # every turn after the first saw the episode so far as a prefix, served from KV
    for turn in trajectory.turns[1:]:
        assert turn.cached_tokens > 0 and turn.context_tokens > len(trajectory.prompt_ids)


def test_the_openai_client_works_and_every_answer_carries_the_version(server) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=f"{server.url}/v1", api_key=AGENT_KEY)
    assert [m.id for m in client.models.list().data] == [MODEL]
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Guess a number from 1 to 16."}],
        max_tokens=8,
        logprobs=True,
        extra_body={"return_token_ids": True},
    )
    completion = raw.parse()
    assert raw.headers["X-Policy-Version"] == "0"
    assert completion.model_extra["policy_version"] == 0
    choice = completion.choices[0]
    token_ids = choice.model_extra["token_ids"]
    assert len(token_ids) == len(choice.logprobs.content) == completion.usage.completion_tokens
    text = client.completions.create(model=MODEL, prompt="Guess", max_tokens=4, logprobs=0)
    assert len(text.choices[0].logprobs.token_logprobs) == text.usage.completion_tokens
    assert httpx.post(f"{server.url}/admin/rollouts", json={}).status_code == 401


def test_concurrent_calls_cannot_generate_more_than_the_quota(server) -> None:
    """Issue 34's attack from outside: 16 calls at once under a 500-token quota (7,891
    tokens generated before calls reserved their max_tokens). How many run depends on how
    soon the first ones end and refund what they did not generate; the total never passes."""
    body = {"model": MODEL, "prompt": "Guess", "max_tokens": 100, "temperature": 1.0}
    headers = {"Authorization": f"Bearer {THRIFTY_KEY}"}

    def call(_: int) -> httpx.Response:
        return httpx.post(f"{server.url}/v1/completions", json=body, headers=headers, timeout=120)

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(call, range(16)))
    ran = [a for a in answers if a.status_code == 200]
    assert sum(a.json()["usage"]["completion_tokens"] for a in ran) <= 500
    assert ran
    assert all(a.status_code == 429 for a in answers if a.status_code != 200)


def test_guess_number_rollouts_are_token_faithful_groups(admin, codec) -> None:
    job = {
        "env_id": "rollgym/GuessNumber-v0",
        "group_size": 4,
        "groups_per_batch": 2,
        "max_staleness": 1,
        "sampling": {"temperature": 1.0, "max_tokens": 8},
        "drop_zero_variance": False,
    }
    groups = run_job(admin, job, groups=2)
    for group in groups:
        assert len(group.trajectories) == 4
        for trajectory in group.trajectories:
            check_token_faithful(trajectory, codec)
            assert trajectory.min_version == trajectory.max_version == 0
    metrics = admin.get("/metrics").text
    hit_rate = next(
        float(line.split()[1])
        for line in metrics.splitlines()
        if line.startswith("rollgym_prefix_cache_hit_rate ")
    )
    assert hit_rate > 0.0


def test_sandboxed_rollouts_use_the_shared_pool(admin, codec) -> None:
    job = {
        "env_id": "rollgym/PythonTests-v0",
        "group_size": 2,
        "groups_per_batch": 1,
        "max_staleness": 0,
        "max_turns": 2,
        "sampling": {"temperature": 1.0, "max_tokens": 16},
        "drop_zero_variance": False,
    }
    [group] = run_job(admin, job, groups=1)
    for trajectory in group.trajectories:
        check_token_faithful(trajectory, codec)
    metrics = admin.get("/metrics").text
    waits = [
        line for line in metrics.splitlines() if line.startswith("sandbox_pool_wait_seconds_count")
    ]
    assert waits and float(waits[0].split()[1]) >= 2  # every episode took a box from the pool


def test_a_weight_update_over_http_moves_new_samples_to_the_next_version(
    admin, codec, default_model_dir, tmp_path
) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(default_model_dir, dtype=torch.float32)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.01 * torch.randn_like(parameter))
    model.save_pretrained(tmp_path, safe_serialization=True)
    data = (tmp_path / "model.safetensors").read_bytes()
    version = admin.get("/health").json()["policy_version"]
    bad = admin.post(
        "/admin/weights", content=data[:-100], headers={"X-Expected-Version": str(version)}
    )
    assert bad.status_code == 400 and admin.get("/health").json()["policy_version"] == version
    answer = admin.post(
        "/admin/weights", content=data, headers={"X-Expected-Version": str(version)}
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["policy_version"] == version + 1
    again = admin.post("/admin/weights", content=data, headers={"X-Expected-Version": str(version)})
    assert again.status_code == 409
    job = {
        "env_id": "rollgym/GuessNumber-v0",
        "group_size": 2,
        "groups_per_batch": 1,
        "sampling": {"max_tokens": 8},
        "drop_zero_variance": False,
    }
    admin.post("/admin/rollouts", json=job)
    response = pull_all(admin, 1, version=version + 1, timeout=120)
    admin.delete("/admin/rollouts")
    [trajectory, _] = response.groups[0].trajectories
    assert trajectory.min_version == version + 1
    rest = pull_all(admin, 64, version=version + 1, timeout=0)
    done = [g.group_id for g in [*response.groups, *rest.groups]]
    assert admin.post("/admin/buffer/ack", json={"group_ids": done}).json() == {"acked": len(done)}


def test_the_window_stops_the_sampler_when_nobody_pulls(admin) -> None:
    job = {
        "env_id": "rollgym/GuessNumber-v0",
        "group_size": 2,
        "groups_per_batch": 2,
        "max_staleness": 0,
        "sampling": {"max_tokens": 4},
        "drop_zero_variance": False,
    }
    admin.post("/admin/rollouts", json=job)
    deadline = time.monotonic() + 120
    status = RolloutStatus.model_validate(admin.get("/admin/rollouts").json())
    while status.buffered_groups < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
        status = RolloutStatus.model_validate(admin.get("/admin/rollouts").json())
    time.sleep(2.0)  # room for a wrong admission to show
    status = RolloutStatus.model_validate(admin.delete("/admin/rollouts").json())
    assert status.completed_groups == status.buffered_groups == (0 + 1) * 2
    assert status.dropped_stopped == 0  # nothing was running: the window was full
    drained = pull_all(admin, 8, version=admin.get("/health").json()["policy_version"], timeout=0)
    admin.post("/admin/buffer/ack", json={"group_ids": [g.group_id for g in drained.groups]})


def test_an_external_agent_through_the_openai_client_becomes_a_trajectory(
    server, admin, codec
) -> None:
    from openai import OpenAI

    made = admin.post(
        "/v1/sessions", json={"env_id": "rollgym/GuessNumber-v0", "seed": 3}, headers=AGENT
    )
    session = made.json()
    client = OpenAI(base_url=f"{server.url}/v1", api_key=AGENT_KEY)
    messages = list(session["observation"])
    for _ in range(2):
        answer = client.chat.completions.create(
            model=MODEL,
            messages=messages,
            max_tokens=6,
            extra_headers={"X-Rollgym-Session": session["session_id"]},
        )
        action = answer.choices[0].message.content
        messages.append({"role": "assistant", "content": action})
        step = admin.post(
            f"/v1/sessions/{session['session_id']}/step", json={"action": action}, headers=AGENT
        )
        messages += step.json()["observation"]
        if step.json()["terminated"] or step.json()["truncated"]:
            break
    closed = admin.delete(f"/v1/sessions/{session['session_id']}", headers=AGENT).json()
    assert closed["persisted"] and closed["valid"]
    version = admin.get("/health").json()["policy_version"]
    [group] = pull_all(admin, 1, version=version, timeout=10).groups
    [trajectory] = group.trajectories
    assert trajectory.source == "session" and group.group_id == session["session_id"]
    assert trajectory.agent == "e2e"
    check_token_faithful(trajectory, codec)
    admin.post("/admin/buffer/ack", json={"group_ids": [group.group_id]})


def test_a_crash_and_restart_keeps_every_acked_trajectory_once(server, admin) -> None:
    job = {
        "env_id": "rollgym/GuessNumber-v0",
        "group_size": 2,
        "groups_per_batch": 3,
        "max_staleness": 1,
        "sampling": {"max_tokens": 8},
        "drop_zero_variance": False,
    }
    admin.post("/admin/rollouts", json=job)
    first = pull_all(admin, 2, version=admin.get("/health").json()["policy_version"], timeout=120)
    status = RolloutStatus.model_validate(admin.delete("/admin/rollouts").json())
    made = status.completed_groups  # persisted (and counted) before the crash
    acked = [first.groups[0].group_id]
    leased = [first.groups[1].group_id]  # pulled, never acked: must come back
    assert admin.post("/admin/buffer/ack", json={"group_ids": acked}).json() == {"acked": 1}

    server.kill()
    server.start()
    time.sleep(LEASE_S + 0.5)
    with httpx.Client(base_url=server.url, headers=ADMIN, timeout=120) as fresh:
        version = fresh.get("/health").json()["policy_version"]
        after = pull_all(fresh, 64, version=version, timeout=1)
    ids = [g.group_id for g in after.groups]
    assert len(ids) == len(set(ids)) == made - 1  # nothing lost, nothing twice
    assert acked[0] not in ids and leased[0] in ids
