"""Chat messages become tokens once: template diffing and the per-turn prefix check."""

from __future__ import annotations

import pytest

from rollgym.server.conversation.codec import ChatCodec, ChatTemplateError
from rollgym.server.conversation.transcript import Transcript, check_extends
from rollgym.server.errors import TokenPrefixError

OPENING = [
    {"role": "system", "content": "Guess my number from 1 to 16."},
    {"role": "user", "content": "Guess a number."},
]


@pytest.fixture(scope="module")
def codec(default_model_dir) -> ChatCodec:
    return ChatCodec.from_model_dir(default_model_dir)


def test_appended_tokens_render_the_same_text_as_the_whole_conversation(codec) -> None:
    answer = "8"
    feedback = [{"role": "user", "content": "Higher."}]
    ids = codec.first_prompt(OPENING)
    ids += [*codec.encode(answer), codec.eos_id]  # what the model would sample
    ids += codec.continuation(feedback, stopped=True)
    whole = codec.render([*OPENING, {"role": "assistant", "content": answer}, *feedback])
    assert codec.tokenizer.decode(ids) == whole


def test_a_turn_cut_by_the_length_limit_gets_its_end_token_from_the_environment(codec) -> None:
    feedback = [{"role": "user", "content": "Lower."}]
    cut = codec.continuation(feedback, stopped=False)
    assert cut[0] == codec.eos_id
    assert cut[1:] == codec.continuation(feedback, stopped=True)
    ids = [*codec.first_prompt(OPENING), *codec.encode("12"), *cut]
    whole = codec.render([*OPENING, {"role": "assistant", "content": "12"}, *feedback])
    assert codec.tokenizer.decode(ids) == whole


def test_environment_messages_are_tokenized_once_not_rejoined_with_the_model_text(codec) -> None:
    # The env text starts with the assistant's closer: tokenizing it alone must not merge
    # with the model's last token, so the sampled ids stay exactly as sampled.
    text = codec.continuation_text([{"role": "tool", "content": "42"}], stopped=True)
    assert text.startswith("\n<|im_start|>tool\n42")
    assert text.endswith("<|im_start|>assistant\n")


def test_a_template_that_rewrites_history_is_refused(codec) -> None:
    class Rewriting:
        eos_token = codec.tokenizer.eos_token

        def convert_tokens_to_ids(self, token: str) -> int:
            return 0

        def get_vocab(self) -> dict[str, int]:
            return {self.eos_token: 0}

        def __len__(self) -> int:
            return 1

        def apply_chat_template(self, messages, **kwargs) -> str:
            # Numbers the turns from the end, so appending changes every earlier turn.
            n = len(messages)
            return "".join(
                f"[{n - i}]{m['content']}{self.eos_token}" for i, m in enumerate(messages)
            )

    codec = ChatCodec(Rewriting())
    with pytest.raises(ChatTemplateError, match="append-only"):
        codec.continuation([{"role": "user", "content": "x"}], stopped=True)


def test_check_extends_names_the_first_diverging_token() -> None:
    check_extends([1, 2], [1, 2, 3])
    check_extends([], [5])
    with pytest.raises(TokenPrefixError, match="at token 1"):
        check_extends([1, 2, 3], [1, 9, 3, 4])
    with pytest.raises(TokenPrefixError, match="shorter"):
        check_extends([1, 2, 3], [1, 2])


def test_transcript_masks_env_tokens_and_keeps_sampled_logprobs() -> None:
    transcript = Transcript([10, 11])
    assert transcript.context() == [10, 11]
    transcript.add_model([5, 6], [-0.5, -0.25])
    transcript.add_env([7, 8, 9])
    assert transcript.context() == [10, 11, 5, 6, 7, 8, 9]
    assert transcript.loss_mask == [1, 1, 0, 0, 0]
    assert transcript.logprobs == [-0.5, -0.25, 0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="logprobs"):
        transcript.add_model([1], [])


def test_transcript_fails_loudly_when_its_history_was_changed() -> None:
    transcript = Transcript([10, 11])
    transcript.add_model([5], [-1.0])
    transcript.context()
    transcript.completion_ids[0] = 6  # a bug elsewhere rewrote a sampled token
    with pytest.raises(TokenPrefixError, match="token 2"):
        transcript.context()


# SmolLM2-Instruct's template: ChatML that ignores the ``tools`` it is given.
NO_TOOLS_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TOOLS = [
    {
        "type": "function",
        "function": {"name": "python", "description": "Run code.", "parameters": {}},
    }
]


def test_tools_reach_the_prompt_even_when_the_template_ignores_them(default_model_dir) -> None:
    from transformers import AutoTokenizer

    aware = ChatCodec.from_model_dir(default_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    tokenizer.chat_template = NO_TOOLS_TEMPLATE
    blind = ChatCodec(tokenizer)
    assert aware.renders_tools and not blind.renders_tools
    for codec in (aware, blind):  # both list the tools in the system turn, the same way
        text = codec.render(OPENING, tools=TOOLS)
        assert text.startswith(f"<|im_start|>system\n{OPENING[0]['content']}\n\n# Tools\n")
        assert '"name": "python"' in text
    assert aware.render(OPENING, tools=TOOLS) == blind.render(OPENING, tools=TOOLS)
    no_system = blind.render(OPENING[1:], tools=TOOLS)
    assert no_system.startswith("<|im_start|>system\n# Tools\n")
    assert blind.render(OPENING) == aware.render(OPENING)  # without tools nothing is added
