"""Tool calls parsed out of the text by vLLM's parser of the model's family.

Per family, a call is rendered by that family's real chat template (the templates TRL ships
in ``trl/chat_templates``: no model hub) and read back by vLLM's parser of that family."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trl
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from rollgym.envs.toolformats import ToolCallParser, ToolParserError
from rollgym.server.conversation.codec import ChatCodec
from rollgym.server.conversation.toolcalls import (
    ParsedCall,
    ParsedReply,
    parse_tool_calls,
    read_tool_calls,
)

TOOLS = {"calculator", "python"}
CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "2 + 3"}}</tool_call>'
CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluates an arithmetic expression.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
}
TEMPLATES = Path(trl.__file__).parent / "chat_templates"
# family (vLLM's parser name): the template of a model of that family, its special tokens
# (the first ends a turn), and whether it takes ``arguments`` as an object or a JSON text
FAMILIES = {
    "hermes": ("qwen2_5.jinja", ["<|im_end|>", "<tool_call>", "</tool_call>"], dict),
    "qwen3_json": ("qwen3.jinja", ["<|im_end|>", "<tool_call>", "</tool_call>"], dict),
    "llama3_json": (
        "llama3_1.jinja",
        ["<|eot_id|>", "<|python_tag|>", "<|start_header_id|>", "<|end_header_id|>"],
        dict,
    ),
    "qwen3_coder": ("qwen3_6.jinja", ["<|im_end|>", "<tool_call>", "</tool_call>"], dict),
    "glm45": (
        "glm4moe.jinja",
        ["<|endoftext|>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>"],
        dict,
    ),
    "deepseek_v3": (
        "deepseekv3.jinja",
        [
            "<｜end▁of▁sentence｜>",
            "<｜tool▁calls▁begin｜>",
            "<｜tool▁calls▁end｜>",
            "<｜tool▁call▁begin｜>",
            "<｜tool▁call▁end｜>",
            "<｜tool▁sep｜>",
        ],
        str,
    ),
    "gemma4": ("gemma4.jinja", ["<eos>"], dict),
}


def family_tokenizer(template: str, specials: list[str]) -> PreTrainedTokenizerFast:
    """A byte-level tokenizer holding the family's special tokens, with its real template."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(specials)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, chat_template=template, eos_token=specials[0]
    )


def rendered_call(tokenizer: PreTrainedTokenizerFast, arguments: object) -> str:
    """What the template writes for the assistant's call: the text after the prompt."""
    user = [{"role": "user", "content": "What is 2 + 3?"}]
    call = {
        "type": "function",
        "id": "call_1",
        "function": {"name": "calculator", "arguments": arguments},
    }
    before = tokenizer.apply_chat_template(
        user, tools=[CALCULATOR], add_generation_prompt=True, tokenize=False
    )
    after = tokenizer.apply_chat_template(
        [*user, {"role": "assistant", "content": "", "tool_calls": [call]}],
        tools=[CALCULATOR],
        tokenize=False,
    )
    return after[len(before) :] if after.startswith(before) else after


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_familys_template_renders_a_call_its_vllm_parser_reads_back(family) -> None:
    file, specials, arguments_as = FAMILIES[family]
    tokenizer = family_tokenizer((TEMPLATES / file).read_text(), specials)
    arguments = {"expression": "2 + 3"}
    written = rendered_call(tokenizer, arguments if arguments_as is dict else json.dumps(arguments))
    assert "calculator" in written  # the template did render the call
    parser = ToolCallParser(family, tokenizer)
    reply = read_tool_calls(written, [CALCULATOR], parser)
    assert [(c.name, json.loads(c.arguments)) for c in reply.calls] == [("calculator", arguments)]


def test_an_unknown_family_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ToolParserError, match=r"vLLM has no tool parser .hermes3.*llama3_json"):
        ToolCallParser("hermes3")


def test_a_family_whose_markers_the_tokenizer_lacks_is_refused_at_once(codec) -> None:
    with pytest.raises(ToolParserError, match="'llama3_json' tool parser cannot read"):
        ToolCallParser("llama3_json", codec.tokenizer)


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
    taught = '<tool_call>{"name": ..., "arguments": {...}}</tool_call>'
    assert taught in prompt and json.dumps(CALCULATOR) in prompt
