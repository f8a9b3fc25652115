"""Tool calls parsed out of the text, in the format the served models' prompts teach."""

from __future__ import annotations

import json

import pytest

from rollgym.server.conversation.codec import ChatCodec
from rollgym.server.conversation.toolcalls import (
    CLOSE,
    OPEN,
    ParsedCall,
    ParsedReply,
    parse_tool_calls,
)

TOOLS = {"calculator", "python"}
CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "2 + 3"}}</tool_call>'
CALCULATOR = {
    "type": "function",
    "function": {"name": "calculator", "parameters": {"type": "object"}},
}


def test_a_call_after_text_is_split_into_content_and_calls() -> None:
    reply = parse_tool_calls(f"Let me compute it.\n{CALL}", TOOLS)
    assert reply == ParsedReply(
        content="Let me compute it.",
        calls=[ParsedCall(name="calculator", arguments='{"expression": "2 + 3"}')],
    )


def test_calls_alone_leave_no_content_and_keep_their_order() -> None:
    second = '<tool_call>{"name": "python", "arguments": {"code": "print(1)"}}</tool_call>'
    reply = parse_tool_calls(f"{CALL}\n{second}", TOOLS)
    assert reply.content is None
    assert [c.name for c in reply.calls] == ["calculator", "python"]
    assert json.loads(reply.calls[1].arguments) == {"code": "print(1)"}


def test_arguments_written_as_a_json_text_are_taken_as_the_object() -> None:
    # What a template that renders OpenAI's string arguments shows the model in its context.
    text = (
        '<tool_call>{"name": "calculator", "arguments": "{\\"expression\\": \\"1\\"}"}</tool_call>'
    )
    [call] = parse_tool_calls(text, TOOLS).calls
    assert json.loads(call.arguments) == {"expression": "1"}


@pytest.mark.parametrize(
    "text",
    [
        "The answer is 5.",
        f"{CALL} and an unclosed <tool_call>",
        '<tool_call>{"name": "calculator", "arguments": {"expression": </tool_call>',
        '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>',
        '<tool_call>{"name": "calculator", "arguments": [1]}</tool_call>',
        '<tool_call>{"name": "calculator", "arguments": {}, "id": 1}</tool_call>',
        '<tool_call>{"name": ["calculator"], "arguments": {}}</tool_call>',
        '<tool_call>{"name": "calculator", "arguments": {"x": NaN}}</tool_call>',
        f"{CALL}<tool_call>not json</tool_call>",
    ],
)
def test_anything_but_well_formed_calls_of_declared_tools_stays_text(text) -> None:
    assert parse_tool_calls(text, TOOLS) == ParsedReply(content=text, calls=[])


def test_the_default_models_template_renders_calls_the_parser_reads_back(
    default_model_dir,
) -> None:
    codec = ChatCodec.from_model_dir(default_model_dir)
    call = {"type": "function", "function": {"name": "calculator", "arguments": '{"x": "1"}'}}
    assistant = {"role": "assistant", "content": "Sure.", "tool_calls": [call]}
    rendered = codec.render([{"role": "user", "content": "1?"}, assistant], generation_prompt=False)
    turn = rendered.split("<|im_start|>assistant\n")[1].removesuffix("<|im_end|>\n")
    assert parse_tool_calls(turn, TOOLS) == ParsedReply(
        content="Sure.", calls=[ParsedCall(name="calculator", arguments='{"x": "1"}')]
    )


@pytest.mark.parametrize("model", ["default", "smollm2"])
def test_both_served_models_are_taught_the_parsed_format(
    model, default_model_dir, smollm2_dir
) -> None:
    codec = ChatCodec.from_model_dir(default_model_dir if model == "default" else smollm2_dir)
    prompt = codec.render([{"role": "user", "content": "2 + 3?"}], tools=[CALCULATOR])
    taught = f'{OPEN}{{"name": ..., "arguments": {{...}}}}{CLOSE}'
    assert taught in prompt and json.dumps(CALCULATOR) in prompt
