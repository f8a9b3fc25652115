"""Text spaces, message hygiene and strict parsing of the agent's message."""

from __future__ import annotations

import pytest
from gymnasium import spaces

from rollgym.envs.errors import ActionError
from rollgym.envs.messages import clean_text, clip_text
from rollgym.envs.parsing import code_blocks, extract_code, parse_tool_calls
from rollgym.envs.spaces import ChatText, Messages
from rollgym.envs.tools import Tool, ToolCall

ADD = Tool(
    "add",
    "Add two integers.",
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    },
)


# --- spaces -------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "8", "héllo 👋", "中文 עברית", "a\u200b\u0301b", "x" * 50])
def test_chat_text_holds_any_unicode_that_gymnasium_text_rejects(text: str) -> None:
    assert text in ChatText(max_length=50)
    if text and not text.isalnum():
        assert text not in spaces.Text(max_length=50)


def test_chat_text_bounds_length_and_type() -> None:
    space = ChatText(max_length=3)
    assert "abcd" not in space
    assert b"abc" not in space
    assert None not in space


def test_chat_text_samples_are_seeded_and_inside_the_space() -> None:
    one, two = ChatText(max_length=20, seed=7), ChatText(max_length=20, seed=7)
    samples = [one.sample() for _ in range(50)]
    assert samples == [two.sample() for _ in range(50)]
    assert all(s in one for s in samples)
    assert any(not s.isascii() for s in samples)
    for sample in samples:
        sample.encode("utf-8")  # raises on a lone surrogate


def test_messages_space_checks_shape_roles_and_content() -> None:
    space = Messages(ChatText(max_length=5), roles=("system", "user"))
    assert ({"role": "user", "content": "hi"},) in space
    assert () in space
    assert [{"role": "user", "content": "hi"}] not in space  # observations are tuples
    assert ({"role": "tool", "content": "hi"},) not in space
    assert ({"role": "user", "content": "too long"},) not in space
    assert ({"role": "user", "content": "hi", "name": "x"},) not in space
    space.seed(3)
    assert all(space.sample() in space for _ in range(20))


# --- message hygiene ----------------------------------------------------------------------


def test_clean_text_replaces_control_bytes_and_surrogates_but_keeps_layout() -> None:
    assert clean_text("a\x00b\x1bc\ud800d\te\nf") == "a\ufffdb\ufffdc\ufffdd\te\nf"
    assert clean_text("emoji 😀 ok").encode("utf-8")


def test_clip_text_never_exceeds_its_limit_and_says_what_was_cut() -> None:
    for size in (10, 100, 5000):
        clipped = clip_text("y" * 10_000, size)
        assert len(clipped) <= size
    clipped = clip_text("y" * 10_000, 100)
    kept = clipped.split("\n")[0]
    assert set(kept) == {"y"}
    assert clipped.endswith(f"[... {10_000 - len(kept)} more characters cut]")
    assert clip_text("short", 100) == "short"


# --- code blocks --------------------------------------------------------------------------


def test_extract_code_takes_the_one_block() -> None:
    text = "Sure:\n```python\ndef f():\n    return 1\n```\nDone."
    assert extract_code(text, languages=("python",)) == "def f():\n    return 1"
    assert extract_code("```\nls\n```", languages=("bash",)) == "ls"


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("just words", "No code block"),
        ("```python\nx = 1\n```\n```python\ny = 2\n```", "exactly one"),
        ("```python\nx = 1\n", "never closed"),
        ("```bash\nls\n```", "got a ```bash block"),
        ("```python\n   \n```", "empty"),
        ("```python\nx = '\x00'\n```", "NUL"),
    ],
)
def test_extract_code_rejects_with_a_message_for_the_agent(text: str, complaint: str) -> None:
    with pytest.raises(ActionError, match=complaint):
        extract_code(text, languages=("python", "py"))


def test_code_blocks_reports_language_of_each() -> None:
    assert code_blocks("```Python\na\n```\ntext\n```sh\nb\n```") == [("python", "a"), ("sh", "b")]


# --- tool calls ---------------------------------------------------------------------------


def test_parse_tool_calls_reads_every_call_in_order() -> None:
    text = (
        'Let me add. <tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>\n'
        '<tool_call>\n{"name": "add", "arguments": {"a": -1, "b": 5}}\n</tool_call>'
    )
    assert parse_tool_calls(text, [ADD]) == [
        ToolCall("add", {"a": 1, "b": 2}),
        ToolCall("add", {"a": -1, "b": 5}),
    ]
    assert parse_tool_calls("no calls here", [ADD]) == []


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("<tool_call>{not json}</tool_call>", "could not be read"),
        ('<tool_call>{"name": "add", "arguments": {"a": NaN, "b": 1}}</tool_call>', "invalid JSON"),
        ('<tool_call>{"name": "sub", "arguments": {}}</tool_call>', "unknown tool 'sub'"),
        ('<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>', "'b' is a required"),
        ('<tool_call>{"name": "add", "arguments": {"a": "1", "b": 2}}</tool_call>', "not of type"),
        ('<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2, "c": 3}}</tool_call>', "c"),
        ('<tool_call>{"name": "add", "arguments": "{}"}</tool_call>', "must be a JSON object"),
        ('<tool_call>{"name": "add"}</tool_call>', "could not be read"),
        ('<tool_call>["add", {}]</tool_call>', "could not be read"),
        ('<tool_call>{"name": "add", "arguments": {}}', "Unbalanced"),
        ("<tool_call><tool_call>{}</tool_call></tool_call>", "could not be read"),
        ('<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>' * 9, "Too many"),
        # bounds on what the agent makes the host parse (issue 34): never the host's exception
        ("<tool_call>" + "[" * 5000 + "]" * 5000 + "</tool_call>", "nested 5000 deep"),
        (
            '<tool_call>{"name": "add", "arguments": {"a": '
            + "[" * 40
            + "]" * 40
            + "}}</tool_call>",
            "nested 42",
        ),
        ('<tool_call>{"name": "add", "arguments": {"a\\u0000": 1}}</tool_call>', "NUL"),
        (
            '<tool_call>{"name": "add", "arguments": {"a": 1, "b": "\\ud800"}}</tool_call>',
            "surrogate",
        ),
        (
            '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 1'
            + "0" * 5000
            + "}}</tool_call>",
            "could not be read",  # past Python's 4300 digits: vLLM's parser reads no call
        ),
    ],
)
def test_parse_tool_calls_is_strict(text: str, complaint: str) -> None:
    with pytest.raises(ActionError, match=complaint):
        parse_tool_calls(text, [ADD])


def test_tools_are_in_openai_function_format() -> None:
    assert ADD.to_openai() == {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": ADD.parameters,
        },
    }
    with pytest.raises(Exception, match="is not valid"):
        Tool("bad", "schema is wrong", {"type": "no-such-type"})
