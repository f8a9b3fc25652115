"""Chat messages to token ids, once: the first prompt, then each new batch of messages.

Multi-turn RL must train on exactly the tokens the model saw and sampled. So the context
is never re-rendered and re-tokenized: the sampled ids are appended as they are, and each
batch of new environment messages is rendered ONCE by *template diffing* and appended.

Template diffing renders a fixed anchor conversation (system, user, assistant) with and
without the new messages and keeps the difference, the exact text the chat template puts
between an assistant turn and the next generation prompt::

    anchor  = "<|im_start|>system\\nS<|im_end|>\\n...<|im_start|>assistant\\nA<|im_end|>\\n"
    + new   = anchor + "<|im_start|>user\\n5 is too low<|im_end|>\\n<|im_start|>assistant\\n"

The assistant's own closing text after its end-of-turn token (ChatML: ``"\\n"``) is part of
what the environment appends; when the model was cut off by the length limit the
end-of-turn token itself is appended too (as an environment token, so it is masked).

Tools: a template that renders the ``tools`` it is given (Qwen2's, the default model's) is
used as it is. One that ignores them (SmolLM2's) would leave the model blind to the tools,
so the codec then lists them in the system message itself (``tool_instructions``), in the
format the default model's template uses; the model calls a tool by writing
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` either way.

Input the template or the tokenizer cannot take (malformed ``tool_calls``, text that is not
valid Unicode) is a ``ChatInputError``: a 422 on a request, an infrastructure failure
when an env produced it. Request data is bounded before any work starts
(``check_chars``: text too long to fit the model's context is refused without being
tokenized) and tokenized off the event loop by the routes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rollgym.server.errors import BadRequest, ServerError

# A message as the chat template takes it: role and content, and for tool calls more keys.
TemplateMessage = dict[str, Any]
_ANCHOR: tuple[TemplateMessage, ...] = (
    {"role": "system", "content": "S"},
    {"role": "user", "content": "U"},
    {"role": "assistant", "content": "A"},
)


_PROBE_TOOL = {
    "type": "function",
    "function": {"name": "probe", "description": "P", "parameters": {"type": "object"}},
}


def tool_instructions(tools: Sequence[dict[str, Any]]) -> str:
    """How to call ``tools``, for a system message (what a tool-aware template would say)."""
    listed = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
    return (
        '# Tools\nCall a tool with <tool_call>{"name": ..., "arguments": {...}}</tool_call>.\n'
        f"<tools>\n{listed}\n</tools>"
    )


def with_tool_instructions(
    messages: Sequence[TemplateMessage], tools: Sequence[dict[str, Any]]
) -> list[TemplateMessage]:
    """``messages`` with the tools listed in the system message (one is added if none)."""
    text = tool_instructions(tools)
    if messages and messages[0].get("role") == "system":
        first = dict(messages[0])
        first["content"] = f"{first.get('content') or ''}\n\n{text}"
        return [first, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


class ChatTemplateError(ServerError):
    """The model's chat template cannot be used append-only (it rewrites earlier turns)."""


class ChatInputError(BadRequest):
    """Messages, tools or text that the chat template or the tokenizer cannot take."""


class ChatCodec:
    """A tokenizer and its chat template, used append-only.

    Example::

        codec = ChatCodec.from_model_dir(model_dir)
        ids = codec.first_prompt([{"role": "user", "content": "Guess a number"}])
        ids += sampled_ids                                   # exactly as sampled
        ids += codec.continuation([{"role": "user", "content": "higher"}], stopped=True)
    """

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        eos = tokenizer.eos_token
        if eos is None:
            raise ChatTemplateError("the tokenizer has no eos_token (the end-of-turn token)")
        self.eos_token: str = eos
        self.eos_id: int = tokenizer.convert_tokens_to_ids(eos)
        self._anchor = self.render(_ANCHOR, generation_prompt=False)
        content_end = self._anchor.rindex(_ANCHOR[-1]["content"]) + 1
        tail = self._anchor[content_end:]
        if not tail.startswith(eos):
            raise ChatTemplateError(
                f"the chat template does not end an assistant turn with {eos!r}: got {tail!r}"
            )
        self._closer = tail[len(eos) :]
        self.renders_tools = self._template_renders_tools()
        # No token decodes to more characters than its vocabulary entry has (byte-level and
        # sentencepiece vocabularies alike), so text of n characters has at least
        # n / longest tokens: the bound ``check_chars`` applies before tokenizing.
        self.longest_token_chars = max(len(token) for token in tokenizer.get_vocab())
        self.vocab_size: int = len(tokenizer)

    def check_chars(self, chars: int, max_tokens: int) -> None:
        """Refuse text of ``chars`` characters that cannot fit ``max_tokens`` tokens.

        Cheap and sound: it never refuses text that would fit, and it spares the tokenizer
        (and the event loop) megabytes of text that never could.
        """
        if chars > max_tokens * self.longest_token_chars:
            raise ChatInputError(
                f"the prompt has {chars} characters, at least "
                f"{chars // self.longest_token_chars} tokens: more than the {max_tokens} the "
                "model's context holds"
            )

    @classmethod
    def from_model_dir(cls, model_dir: str | Path) -> ChatCodec:
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(str(model_dir)))

    def render(
        self,
        messages: Sequence[TemplateMessage],
        *,
        generation_prompt: bool = True,
        tools: list[dict[str, Any]] | None = None,
    ) -> str:
        if tools and not self.renders_tools:
            messages, tools = with_tool_instructions(messages, tools), None
        return self._apply(messages, generation_prompt=generation_prompt, tools=tools)

    def _apply(
        self,
        messages: Sequence[TemplateMessage],
        *,
        generation_prompt: bool,
        tools: list[dict[str, Any]] | None = None,
    ) -> str:
        try:
            text = self.tokenizer.apply_chat_template(
                list(messages), tools=tools, add_generation_prompt=generation_prompt, tokenize=False
            )
        except Exception as exc:  # jinja's errors, and whatever the template trips over
            raise ChatInputError(
                f"the chat template cannot render these messages: {exc!r}"
            ) from None
        return str(text)

    def _template_renders_tools(self) -> bool:
        messages = [{"role": "user", "content": "U"}]
        bare = self._apply(messages, generation_prompt=True)
        return self._apply(messages, generation_prompt=True, tools=[_PROBE_TOOL]) != bare

    def encode(self, text: str) -> list[int]:
        try:
            return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        except Exception as exc:  # e.g. text that is not valid Unicode
            raise ChatInputError(f"the tokenizer cannot encode this text: {exc!r}") from None

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))

    def first_prompt(
        self, messages: Sequence[TemplateMessage], *, tools: list[dict[str, Any]] | None = None
    ) -> list[int]:
        """The opening messages, rendered with the generation prompt and tokenized."""
        return self.encode(self.render(messages, tools=tools))

    def continuation_text(self, messages: Sequence[TemplateMessage], *, stopped: bool) -> str:
        """The text that follows an assistant turn: its closer, ``messages``, the next prompt.

        ``stopped`` says whether the model ended its turn with the end-of-turn token; if it
        did not (length limit), the token is part of the continuation.
        """
        full = self.render([*_ANCHOR, *messages])
        if not full.startswith(self._anchor):
            raise ChatTemplateError(
                "the chat template renders earlier turns differently once messages are "
                "appended; rollgym needs an append-only template"
            )
        suffix = full[len(self._anchor) :]
        return self._closer + suffix if stopped else self.eos_token + self._closer + suffix

    def continuation(self, messages: Sequence[TemplateMessage], *, stopped: bool) -> list[int]:
        """``continuation_text`` tokenized: what to append after the sampled ids."""
        return self.encode(self.continuation_text(messages, stopped=stopped))
