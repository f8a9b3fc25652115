"""Constrained decoding on the real vLLM engine, through the chat route: what frameworks
send by default (``response_format``, ``tool_choice``) is what the default model writes,
and the ids it sampled are the ones returned. (The unit twin: test_server_openai_constraints.)
"""

from __future__ import annotations

import json

import jsonschema
import pytest
import pytest_asyncio
from test_archive_export import serving

from rollgym.engine.config import EngineConfig
from rollgym.server.access.agent_keys import AgentKeysConfig
from rollgym.server.app import create_app
from rollgym.server.config import ServerSettings
from rollgym.server.conversation.codec import ChatCodec

pytestmark = pytest.mark.asyncio(loop_scope="module")
KEY = {"Authorization": "Bearer engine-test-agent-key"}
ASK = [{"role": "user", "content": "Is 7 a prime number? Answer in JSON."}]
VERDICT = {
    "type": "object",
    "properties": {"prime": {"type": "boolean"}, "why": {"enum": ["divisors", "none"]}},
    "required": ["prime", "why"],
    "additionalProperties": False,
}
CHECK = {
    "type": "function",
    "function": {
        "name": "check",
        "parameters": {
            "type": "object",
            "properties": {"number": {"enum": [2, 3, 5, 7]}},
            "required": ["number"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(tmp_path_factory, default_model_dir):
    engine = EngineConfig(model_dir=default_model_dir, max_model_len=512, kv_cache_gib=0.5)
    settings = ServerSettings(
        admin_token="engine-test-admin-token",
        data_dir=tmp_path_factory.mktemp("constrained") / "data",
        engine=engine,
        agents=AgentKeysConfig(keys={"engine-test-agent": KEY["Authorization"][7:]}),
    )
    async with serving(create_app(settings)) as client:
        yield client


async def chat(client, **body) -> dict:
    body = {"model": "rollgym-tiny", "messages": ASK, "max_tokens": 96, "seed": 1, **body}
    answer = await client.post("/v1/chat/completions", json=body, headers=KEY)
    assert answer.status_code == 200, answer.text
    return answer.json()


@pytest.mark.parametrize("temperature", [0.0, 1.0])
async def test_a_json_schema_answer_parses_against_the_schema(client, temperature) -> None:
    response_format = {"type": "json_schema", "json_schema": {"name": "v", "schema": VERDICT}}
    body = await chat(client, response_format=response_format, temperature=temperature)
    [choice] = body["choices"]
    assert choice["finish_reason"] == "stop"
    jsonschema.validate(json.loads(choice["message"]["content"]), VERDICT)


async def test_a_required_call_is_written_in_the_models_format(client, default_model_dir) -> None:
    body = await chat(
        client, tools=[CHECK], tool_choice="required", temperature=1.0, return_token_ids=True
    )
    [choice] = body["choices"]
    [call] = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "check"
    jsonschema.validate(json.loads(call["function"]["arguments"]), CHECK["function"]["parameters"])
    # the sampled ids are the model's own call block, as any call it writes unasked
    written = ChatCodec.from_model_dir(default_model_dir).decode(choice["token_ids"])
    assert written.startswith('<tool_call>{"name": "check"') or written.startswith(
        '<tool_call>\n{"name": "check"'
    )
