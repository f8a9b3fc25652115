"""Training on a folder of Harbor tasks: GRPO steps through the real server and its pool of
boxes per image, and the LLM judge against the server's own OpenAI endpoint.

Three example tasks, two images (sum-column and count-errors share their environment/,
so their image and its warm boxes), built offline; ``rollgym serve`` (the vLLM engine on
the default model) with ``ROLLGYM_SANDBOXES__MAX_BOXES``; the trainer's own loop
(``rollgym.trainer.loop.train``) against it, as tests/e2e/test_trainer_e2e.py does.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from rollgym.contract.wire import PullRequest, RolloutJob, SamplingSettings
from rollgym.envs.dataset.judge import Judge, JudgeFailed
from rollgym.envs.dataset.verifiers import JudgeVerifier
from rollgym.envs.harbor.image import image_tag
from rollgym.envs.harbor.task import read_tasks
from rollgym.run.server_process import ServerProcess
from rollgym.tasks.build import build_tasks
from rollgym.trainer.client import ServerClient
from rollgym.trainer.config import TrainerConfig
from rollgym.trainer.loop import train

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"
TASKS = ("count-words", "sum-column", "count-errors")
GROUP_SIZE, GROUPS = 2, 2
AGENT_KEY = "harbor-e2e-agent-key-0123456789"


@pytest.fixture(scope="module")
def tasks_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("harbor-tasks")
    for name in TASKS:
        shutil.copytree(EXAMPLES / name, folder / name)
    assert all(r.outcome != "failed" for r in build_tasks(folder, progress=lambda line: None))
    return folder


@pytest.fixture(scope="module")
def server(tmp_path_factory, default_model_dir, tasks_dir) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("harbor-e2e")
    with ServerProcess(
        model_dir=default_model_dir,
        data_dir=root / "server",
        threads=1,
        settings={
            "ROLLGYM_BUFFER__LEASE_TIMEOUT_S": "5",
            "ROLLGYM_ENGINE__MAX_MODEL_LEN": "2048",
            "ROLLGYM_SANDBOXES__MAX_BOXES": "6",
            "ROLLGYM_AGENTS__KEYS": json.dumps({"e2e": AGENT_KEY}),
        },
    ) as process:
        yield process


def _job(tasks_dir: Path) -> RolloutJob:
    return RolloutJob(
        env_id="harbor/Tasks-v0",
        env_kwargs={"tasks_dir": str(tasks_dir), "command_timeout_s": 5},
        group_size=GROUP_SIZE,
        groups_per_batch=GROUPS,
        max_staleness=1,
        max_turns=2,
        sampling=SamplingSettings(temperature=1.0, max_tokens=16),
        drop_zero_variance=False,
    )


def test_grpo_steps_on_three_tasks_of_two_images(server, tasks_dir, default_model_dir, tmp_path):
    images = {task.name: image_tag(task) for task in read_tasks(tasks_dir)}
    assert len(set(images.values())) == 2
    config = TrainerConfig(
        output_dir=tmp_path / "run",
        group_size=GROUP_SIZE,
        groups_per_batch=GROUPS,
        max_staleness=1,
        total_steps=3,
        learning_rate=1e-3,
        pull_timeout_s=5.0,
        stall_timeout_s=300.0,
    )
    with ServerClient(server.client_config()) as client:
        start = client.policy_version()
        result = train(
            config,
            client,
            default_model_dir,
            on_ready=lambda: client.start_rollouts(_job(tasks_dir)),
            printer=None,
        )
        assert result.steps == 3
        assert client.policy_version() == start + 4  # the first push, then one per step
        # more episodes until both images were played (the archive keeps the trained ones)
        seen = _tasks_played(server, client)
        client.stop_rollouts()
    assert {images[name] for name in seen} == set(images.values()), seen
    metrics = httpx.get(f"{server.url}/metrics", timeout=30).text
    for image in set(images.values()):
        assert f'sandbox_image_cold_starts_total{{image="{image}"}}' in metrics
        assert f'sandbox_image_warm_hits_total{{image="{image}"}}' in metrics


def _tasks_played(server: ServerProcess, client: ServerClient) -> set[str]:
    """The tasks of the episodes the server produced, read from their opening messages."""
    instructions = {task.instruction.splitlines()[0]: task.name for task in read_tasks(EXAMPLES)}
    seen: set[str] = set()
    for _ in range(30):
        answer = client.pull(
            PullRequest(
                trainer_version=client.policy_version(), max_staleness=8, num_groups=2, timeout_s=30
            )
        )
        client.ack([group.group_id for group in answer.groups])
        for group in answer.groups:
            for trajectory in group.trajectories:
                assert trajectory.valid, trajectory.invalid_reason
                opening = next(m.content for m in trajectory.messages if m.role == "user")
                seen.add(instructions[opening.splitlines()[0]])
        if "count-words" in seen and seen & {"sum-column", "count-errors"}:
            break
    return seen


def test_the_judge_asks_the_servers_own_openai_endpoint(server) -> None:
    """The judge's real twin: one chat completion on the served model, timed and counted;
    the tiny untrained model's reply is rarely a score, which must then be a JudgeFailed
    (never a 0), and the same question asked again is answered the same way."""
    model = httpx.get(f"{server.url}/v1/models", timeout=30, headers=_agent()).json()["data"][0][
        "id"
    ]
    config = JudgeVerifier(
        base_url=f"{server.url}/v1", model=model, api_key_env="ROLLGYM_E2E_JUDGE_KEY", max_tokens=4
    )
    judge = Judge(config)
    outcomes = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ROLLGYM_E2E_JUDGE_KEY", AGENT_KEY)
        for _ in range(2):
            try:
                outcomes.append(judge.score("What is 17 * 23?", "391", "391"))
            except JudgeFailed as exc:
                outcomes.append(str(exc))
    assert judge.stats.seconds > 0 and judge.stats.calls >= 1
    if isinstance(outcomes[0], float):
        assert 0.0 <= outcomes[0] <= 1.0 and outcomes[1] == outcomes[0]
        assert (judge.stats.calls, judge.stats.cache_hits) == (1, 1)
        assert judge.stats.completion_tokens > 0
    else:
        assert "not a score in [0, 1]" in outcomes[0]
        assert (judge.stats.calls, judge.stats.failures) == (2, 2)  # failures are not cached


def _agent() -> dict[str, str]:
    return {"Authorization": f"Bearer {AGENT_KEY}"}
