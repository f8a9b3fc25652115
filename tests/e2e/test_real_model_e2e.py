"""The whole stack on a real pretrained model: ``rollgym serve --model-dir`` on
SmolLM2-135M-Instruct (its 49k tokenizer and chat template, tied embeddings), an external
agent's session with tools through the OpenAI client, and the trainer's GRPO step, weight
push and checkpoint against it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from rollgym.contract.wire import PullRequest, RolloutJob, SamplingSettings
from rollgym.run.server_process import ServerProcess
from rollgym.server.conversation.codec import ChatCodec
from rollgym.trainer.client import ServerClient
from rollgym.trainer.config import TrainerConfig
from rollgym.trainer.loop import train

MODEL = "smollm2-135m-instruct"
AGENT_KEY = "e2e-agent-key-0123456789"
AGENTS = {"ROLLGYM_AGENTS__KEYS": json.dumps({"e2e": AGENT_KEY})}
AGENT = {"Authorization": f"Bearer {AGENT_KEY}"}
CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
}


@pytest.fixture(scope="module")
def server(smollm2_dir, tmp_path_factory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("real")
    settings = {
        "ROLLGYM_ENGINE__MAX_MODEL_LEN": "1024",
        "ROLLGYM_SANDBOXES__POOL_SIZE": "0",
        **AGENTS,
    }
    with ServerProcess(model_dir=smollm2_dir, data_dir=root / "data", settings=settings) as server:
        yield server


@pytest.fixture(scope="module")
def admin(server) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {server.admin_token}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=300) as client:
        yield client


def test_a_session_with_tools_through_the_openai_client(server, admin, smollm2_dir) -> None:
    from openai import OpenAI

    codec = ChatCodec.from_model_dir(smollm2_dir)
    made = admin.post(
        "/v1/sessions", json={"env_id": "reasoning_gym/chain_sum", "seed": 1}, headers=AGENT
    )
    assert made.status_code == 201, made.text
    session = made.json()
    client = OpenAI(base_url=f"{server.url}/v1", api_key=AGENT_KEY)
    answer = client.chat.completions.create(
        model=MODEL,
        messages=session["observation"],
        tools=[CALCULATOR],
        tool_choice="none",  # the text as sampled: compared with the recorded tokens below
        max_tokens=48,
        extra_headers={"X-Rollgym-Session": session["session_id"]},
    )
    action = answer.choices[0].message.content or ""
    step = admin.post(
        f"/v1/sessions/{session['session_id']}/step", json={"action": action}, headers=AGENT
    )
    assert step.json()["terminated"]
    closed = admin.delete(f"/v1/sessions/{session['session_id']}", headers=AGENT).json()
    assert closed["persisted"] and closed["valid"]
    pulled = admin.post(
        "/admin/buffer/pull",
        json={"trainer_version": 0, "max_staleness": 4, "num_groups": 1, "timeout_s": 10},
    ).json()
    [trajectory] = pulled["groups"][0]["trajectories"]
    prompt = codec.tokenizer.decode(trajectory["prompt_ids"])
    assert '"name": "calculator"' in prompt  # the template ignores tools; the codec lists them
    assert prompt.endswith("<|im_start|>assistant\n")
    sampled = [
        i for i, m in zip(trajectory["completion_ids"], trajectory["loss_mask"], strict=True) if m
    ]
    assert codec.decode(sampled) == action
    admin.post("/admin/buffer/ack", json={"group_ids": [pulled["groups"][0]["group_id"]]})


def test_the_trainer_trains_pushes_and_checkpoints_the_real_model(
    server, smollm2_dir, tmp_path
) -> None:
    config = TrainerConfig(
        output_dir=tmp_path / "grpo",
        group_size=2,
        groups_per_batch=2,
        max_staleness=0,
        total_steps=1,
        learning_rate=1e-5,
        pull_timeout_s=60,
    )
    job = RolloutJob(
        env_id="rollgym/GuessNumber-v0",
        env_kwargs={"low": 1, "high": 4},
        group_size=2,
        groups_per_batch=2,
        max_staleness=0,
        max_turns=2,
        sampling=SamplingSettings(max_tokens=8),
        drop_zero_variance=False,
    )
    with ServerClient(server.client_config(request_timeout_s=120)) as client:
        version = client.policy_version()
        client.start_rollouts(job)
        try:
            result = train(config, client, smollm2_dir, printer=None)
        finally:
            client.stop_rollouts()
        assert result.steps == 1 and result.policy_version == client.policy_version() > version
        leftover = client.pull(
            PullRequest(
                trainer_version=result.policy_version, max_staleness=4, num_groups=64, timeout_s=0
            )
        )
        client.ack([g.group_id for g in leftover.groups])
    checkpoints = sorted((tmp_path / "grpo").glob("checkpoint-*"))
    assert checkpoints and (checkpoints[-1] / "model.safetensors").is_file()
