"""The official ``openai`` client against ``rollgym serve`` on the default model: tools,
``n``, ``seed`` and ``stream=True`` on the real engine and the real wire.

The default model's weights are random, so what it writes is noise: the test checks that a
streamed answer is the same answer as the unstreamed one with the same seed, chunk by chunk
as the client reassembles it, with the policy version and token ids rollgym adds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from rollgym.run.server_process import ServerProcess

MODEL = "rollgym-tiny"
AGENT_KEY = "e2e-agent-key-0123456789"
AGENTS = {"ROLLGYM_AGENTS__KEYS": json.dumps({"e2e": AGENT_KEY})}
CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
    },
}


@pytest.fixture(scope="module")
def server(default_model_dir, tmp_path_factory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("openai")
    settings = {
        "ROLLGYM_ENGINE__MAX_MODEL_LEN": "1024",
        "ROLLGYM_SANDBOXES__POOL_SIZE": "0",
        **AGENTS,
    }
    with ServerProcess(model_dir=default_model_dir, data_dir=root / "data", settings=settings) as s:
        yield s


def test_a_streamed_answer_with_tools_is_the_seeded_unstreamed_one(server) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=f"{server.url}/v1", api_key=AGENT_KEY)
    request = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "What is 2 + 3? Use the calculator."}],
        "tools": [CALCULATOR],
        "n": 2,
        "seed": 5,
        "temperature": 1.0,
        "max_tokens": 24,
        "extra_body": {"return_token_ids": True},
    }
    whole = client.chat.completions.create(**request)
    chunks = list(
        client.chat.completions.create(
            **request, stream=True, stream_options={"include_usage": True}
        )
    )
    texts, calls, finished, token_ids = ["", ""], [[], []], [None, None], [None, None]
    for chunk in chunks[:-1]:
        [choice] = chunk.choices
        texts[choice.index] += choice.delta.content or ""
        calls[choice.index] += choice.delta.tool_calls or []
        if choice.finish_reason:
            finished[choice.index] = choice.finish_reason
            token_ids[choice.index] = choice.model_extra["token_ids"]
    for index, choice in enumerate(whole.choices):
        assert texts[index] == (choice.message.content or "")
        assert [c.function.name for c in calls[index]] == [
            c.function.name for c in choice.message.tool_calls or []
        ]
        assert finished[index] == choice.finish_reason in ("stop", "length", "tool_calls")
        assert token_ids[index] == choice.model_extra["token_ids"] and token_ids[index]
    last = chunks[-1]
    assert last.choices == [] and last.usage and whole.usage  # the second call hits the cache
    assert last.usage.prompt_tokens == whole.usage.prompt_tokens
    assert last.usage.completion_tokens == whole.usage.completion_tokens
    assert last.model_extra["policy_version"] == whole.model_extra["policy_version"] == 0
    assert last.model_extra["prompt_token_ids"] == whole.model_extra["prompt_token_ids"]
