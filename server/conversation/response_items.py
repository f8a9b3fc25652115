"""A Responses API request's input as the chat conversation every door records.

A Responses call is answered by the chat path (``server.routes.openai``): its items become
chat messages, so the session's recorder, the template and the token-prefix check see one
conversation whichever door it came through.

- ``instructions`` is a system message before everything else;
- a ``message`` item is a message of its role, its text parts joined;
- ``function_call`` items are the tool calls of the assistant message before them (an
  answer of text then calls came back as a message item then call items), or of an
  assistant message of their own, with empty content, as the chat route shows a
  calls-only answer;
- a ``function_call_output`` item is a ``tool`` message answering its ``call_id``.

>>> from rollgym.contract.responses import FunctionCallItem, MessageItem
>>> chat_messages([MessageItem(role="user", content="2 + 3?"),
...     FunctionCallItem(type="function_call", call_id="c1", name="calc", arguments="{}")])
... # doctest: +NORMALIZE_WHITESPACE
[{'role': 'user', 'content': '2 + 3?'},
 {'role': 'assistant', 'content': '', 'tool_calls': [{'id': 'c1', 'type': 'function',
   'function': {'name': 'calc', 'arguments': '{}'}}]}]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rollgym.contract.responses import FunctionCallItem, FunctionCallOutputItem, MessageItem

ChatMessage = dict[str, Any]


def chat_messages(
    items: Sequence[MessageItem | FunctionCallItem | FunctionCallOutputItem],
    instructions: str | None = None,
) -> list[ChatMessage]:
    """``items`` (after ``instructions``) as chat messages (see the module docstring)."""
    messages: list[ChatMessage] = []
    if instructions is not None:
        messages.append({"role": "system", "content": instructions})
    for item in items:
        if isinstance(item, MessageItem):
            messages.append({"role": item.role, "content": item.text})
        elif isinstance(item, FunctionCallItem):
            call = {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name, "arguments": item.arguments},
            }
            if not messages or messages[-1]["role"] != "assistant":
                messages.append({"role": "assistant", "content": ""})
            messages[-1].setdefault("tool_calls", []).append(call)
        else:
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": item.output})
    return messages
