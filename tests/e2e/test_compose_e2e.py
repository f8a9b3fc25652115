"""``compose.yaml`` end to end: the app image built offline, the loop up in containers.

One compose project for the module, built FROM the local base image (``scripts/setup.sh
app-image``, started in the background when the session begins: ``app_image``; cached after
the first time) with a short run (``tests/e2e/compose/``):

1. ``up``: the server makes the default model, starts its sandbox pool through the Docker
   socket and turns healthy; the trainer warm-starts, trains ``FIRST_STEPS`` GRPO steps
   against it and exits 0. Checked over the server's HTTP API: the policy version, the
   trajectories, the trainer's steps on the dashboard; a sandboxed session answers.
2. ``down`` (volume kept): no container of the project is left, sandboxes included.
3. ``up`` again with more steps: the trainer resumes from its checkpoint on the volume.
4. ``down -v``: nothing left.

Uses ``docker compose`` (v2) when the Docker CLI has it, else Debian's ``docker-compose``.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import app_image
import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
OVERRIDE = ROOT / "tests/e2e/compose/short-run.yaml"
FIRST_STEPS, SECOND_STEPS = 2, 3
UP_TIMEOUT_S = 900.0


def _compose_command() -> list[str]:
    v2 = subprocess.run(["docker", "compose", "version"], capture_output=True)
    if v2.returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.fail("neither `docker compose` nor `docker-compose` is installed")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Project:
    """One compose project (its own name, port, host name, runtime folder)."""

    def __init__(self, tmp: Path) -> None:
        suffix = secrets.token_hex(3)
        self.name = f"rollgym-e2e-{suffix}"
        self.hostname = f"rollgym-e2e-{suffix}"
        self.token = secrets.token_urlsafe(24)
        self.agent_key = secrets.token_urlsafe(24)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp / "compose.log"
        self.env = {
            **os.environ,
            "ROLLGYM_ADMIN_TOKEN": self.token,
            "ROLLGYM_AGENT_KEY": self.agent_key,
            "ROLLGYM_BASE_IMAGE": os.environ.get("ROLLGYM_BASE_IMAGE", "rollgym/base:bookworm"),
            "ROLLGYM_HOST_PORT": str(self.port),
            "ROLLGYM_SERVER_HOSTNAME": self.hostname,
            "ROLLGYM_SANDBOX_POOL_SIZE": "1",
            "ROLLGYM_SANDBOX_RUNTIME_DIR": f"/tmp/rollgym-sbx-{suffix}",
        }
        self.compose = [*_compose_command(), "-p", self.name]
        self.compose += ["-f", str(ROOT / "compose.yaml"), "-f", str(OVERRIDE)]

    def run(self, *args: str, steps: int = FIRST_STEPS, timeout_s: float = 300) -> str:
        env = {**self.env, "ROLLGYM_E2E_STEPS": str(steps)}
        done = subprocess.run(
            [*self.compose, *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        with self.log.open("a") as log:
            log.write(f"$ {' '.join(args)}\n{done.stdout}{done.stderr}\n")
        if done.returncode != 0:
            pytest.fail(f"compose {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def containers(self) -> list[str]:
        """Every container of this project, and every sandbox its server started."""
        project = _docker("ps", "-aq", "--filter", f"label=com.docker.compose.project={self.name}")
        boxes = _docker(
            "ps", "-a", "--filter", "label=rollgym.sandbox",
            "--format", '{{.ID}} {{.Label "rollgym.owner"}}',
        )  # fmt: skip
        ours = [line.split()[0] for line in boxes.splitlines() if line.endswith(self.hostname)]
        return project.split() + ours

    def wait_for_trainer(self, steps: int) -> dict[str, object]:
        """Block until the trainer container exits; return its state (exit code, logs)."""
        deadline = time.monotonic() + UP_TIMEOUT_S
        trainer_id = self.run("ps", "-q", "trainer", steps=steps).strip()
        while time.monotonic() < deadline:
            state = json.loads(_docker("inspect", "-f", "{{json .State}}", trainer_id))
            if state["Status"] == "exited":
                state["logs"] = _docker("logs", trainer_id, stderr=True)
                return state
            time.sleep(3)
        pytest.fail(f"the trainer did not finish in {UP_TIMEOUT_S:.0f} s: see {self.log}")

    def admin(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


def _docker(*args: str, stderr: bool = False) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)}: {done.stderr}")
    return done.stdout + (done.stderr if stderr else "")


@pytest.fixture(scope="module")
def project(tmp_path_factory, pytestconfig) -> Iterator[Project]:
    app_image.wait(pytestconfig)  # started in the background when the session began
    project = Project(tmp_path_factory.mktemp("compose"))
    try:
        yield project
    finally:
        project.run("down", "-v", "--timeout", "60")


def test_up_trains_down_leaves_nothing_up_again_resumes(project) -> None:
    started = time.monotonic()
    project.run("up", "-d", timeout_s=UP_TIMEOUT_S)
    first = project.wait_for_trainer(FIRST_STEPS)
    assert first["ExitCode"] == 0, first["logs"]
    print(f"up -> trainer done: {time.monotonic() - started:.0f} s")
    health = httpx.get(f"{project.url}/health", timeout=10).json()
    # one push of the warm-started weights, then one per step
    assert health["policy_version"] == 1 + FIRST_STEPS
    dashboard = httpx.get(f"{project.url}/dashboard/data", timeout=10).json()
    assert dashboard["trainer_step"] == FIRST_STEPS
    rollouts = httpx.get(f"{project.url}/admin/rollouts", headers=project.admin(), timeout=10)
    assert rollouts.json()["completed_groups"] >= FIRST_STEPS * 2
    assert dashboard["version_lag"], "the trainer pulled trajectories"
    _sandboxed_session_answers(project.url, project.agent_key)

    project.run("down", "--timeout", "60")
    assert project.containers() == []

    project.run("up", "-d", steps=SECOND_STEPS, timeout_s=UP_TIMEOUT_S)
    second = project.wait_for_trainer(SECOND_STEPS)
    assert second["ExitCode"] == 0, second["logs"]
    assert f"checkpoint-{FIRST_STEPS}" in str(second["logs"])  # resumed, not restarted
    dashboard = httpx.get(f"{project.url}/dashboard/data", timeout=10).json()
    assert dashboard["trainer_step"] == SECOND_STEPS
    # the new server comes back at its last version, on the checkpoint's weights: nothing
    # is pushed at resume, then one push for the one new step
    assert (
        httpx.get(f"{project.url}/health", timeout=10).json()["policy_version"] == 2 + FIRST_STEPS
    )

    project.run("down", "-v", "--timeout", "60")
    assert project.containers() == []


def _sandboxed_session_answers(url: str, agent_key: str) -> None:
    """A Shell-v0 session runs a command in a box the server started via the socket; agent
    routes take the configured agent key and nothing else."""
    session_body = {"env_id": "rollgym/Shell-v0", "seed": 0}
    assert httpx.post(f"{url}/v1/sessions", json=session_body, timeout=60).status_code == 401
    agent = httpx.Client(headers={"Authorization": f"Bearer {agent_key}"}, timeout=60)
    created = agent.post(f"{url}/v1/sessions", json=session_body)
    assert created.status_code == 201, created.text
    session = created.json()["session_id"]
    action = "```bash\necho hello-from-the-box\n```"
    step = agent.post(f"{url}/v1/sessions/{session}/step", json={"action": action})
    assert "hello-from-the-box" in step.json()["observation"][0]["content"]
    assert step.json()["info"]["failure"] is None
    agent.delete(f"{url}/v1/sessions/{session}")
