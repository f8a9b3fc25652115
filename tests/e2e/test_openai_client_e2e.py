"""The official ``openai`` client against ``rollgym serve``: tools, ``n``, ``seed`` and
``stream=True`` on the real engine and the real wire.

The server runs the default model taught the tool-call format (``tool_model_dir``: a short
SFT on Compute's play), so its answers call the ``python`` tool: the test checks that the
calls are parsed into OpenAI ``tool_calls``, and that a streamed answer is the same answer
as the unstreamed one with the same seed, chunk by chunk as the client reassembles it,
with the policy version and token ids rollgym adds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from rollgym.envs.compute import PYTHON_TOOL, WITH_TOOL
from rollgym.run.server_process import ServerProcess

MODEL = "test-tool-caller"
AGENT_KEY = "e2e-agent-key-0123456789"
AGENTS = {"ROLLGYM_AGENTS__KEYS": json.dumps({"e2e": AGENT_KEY})}
PYTHON = PYTHON_TOOL.to_openai()


@pytest.fixture(scope="module")
def server(tool_model_dir, tmp_path_factory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("openai")
    settings = {
        "ROLLGYM_ENGINE__MAX_MODEL_LEN": "1024",
        "ROLLGYM_SANDBOXES__POOL_SIZE": "0",
        **AGENTS,
    }
    with ServerProcess(model_dir=tool_model_dir, data_dir=root / "data", settings=settings) as s:
        yield s


def test_a_streamed_answer_with_tools_is_the_seeded_unstreamed_one(server) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=f"{server.url}/v1", api_key=AGENT_KEY)
    request = {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": WITH_TOOL},
            {"role": "user", "content": "What is 4821 * 9377?"},
        ],
        "tools": [PYTHON],
        "n": 4,
        "seed": 5,
        "temperature": 0.5,
        "max_tokens": 64,
        "extra_body": {"return_token_ids": True},
    }
    whole = client.chat.completions.create(**request)
    chunks = list(
        client.chat.completions.create(
            **request, stream=True, stream_options={"include_usage": True}
        )
    )
    texts, calls, finished, token_ids = [""] * 4, [[] for _ in range(4)], [None] * 4, [None] * 4
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
    # the model called the tool, and each call was parsed into OpenAI's form
    made = [call for choice in whole.choices for call in choice.message.tool_calls or []]
    assert made, [choice.message for choice in whole.choices]  # 78% of replies call at 0.5
    for call in made:
        assert call.function.name == "python" and call.id
        assert isinstance(json.loads(call.function.arguments)["code"], str)
    assert "tool_calls" in finished
    last = chunks[-1]
    assert last.choices == [] and last.usage and whole.usage  # the second call hits the cache
    assert last.usage.prompt_tokens == whole.usage.prompt_tokens
    assert last.usage.completion_tokens == whole.usage.completion_tokens
    assert last.model_extra["policy_version"] == whole.model_extra["policy_version"] == 0
    assert last.model_extra["prompt_token_ids"] == whole.model_extra["prompt_token_ids"]
