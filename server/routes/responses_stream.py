"""A Response as the Responses API's typed server-sent events (``stream: true``).

The answer is generated whole first (a bad request still gets its 4xx, never a broken
stream), then sent as the events OpenAI sends, each numbered by ``sequence_number``::

    event: response.created               the response, in progress, no output yet
    event: response.in_progress
    per output item:
      event: response.output_item.added   the item, in progress, empty
      a message:  response.content_part.added, response.output_text.delta (the text),
                  response.output_text.done, response.content_part.done
      a call:     response.function_call_arguments.delta (the arguments),
                  response.function_call_arguments.done
      event: response.output_item.done    the item, whole
    event: response.completed             the response, whole (response.incomplete if cut)

There is no ``[DONE]`` line: the last event says the stream is over.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

from openai.types.responses import (
    ResponseCompletedEvent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseCreatedEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionCallArgumentsDoneEvent,
    ResponseFunctionToolCall,
    ResponseIncompleteEvent,
    ResponseInProgressEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseStreamEvent,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
)

from rollgym.contract.responses import ResponseObject


def response_events(answer: ResponseObject) -> list[ResponseStreamEvent]:
    """``answer`` as the events of its stream, in order (see the module docstring)."""
    number = itertools.count()
    started = answer.model_copy(update={"status": "in_progress", "output": [], "usage": None})
    events: list[ResponseStreamEvent] = [
        ResponseCreatedEvent(
            type="response.created", response=started, sequence_number=next(number)
        ),
        ResponseInProgressEvent(
            type="response.in_progress", response=started, sequence_number=next(number)
        ),
    ]
    for index, item in enumerate(answer.output):
        events += _item_events(item, index, number)
    if answer.status == "incomplete":
        events.append(
            ResponseIncompleteEvent(
                type="response.incomplete", response=answer, sequence_number=next(number)
            )
        )
    else:
        events.append(
            ResponseCompletedEvent(
                type="response.completed", response=answer, sequence_number=next(number)
            )
        )
    return events


def _item_events(item: Any, index: int, number: Iterator[int]) -> list[ResponseStreamEvent]:
    if isinstance(item, ResponseOutputMessage):
        empty = item.model_copy(update={"status": "in_progress", "content": []})
    else:
        empty = item.model_copy(update={"status": "in_progress", "arguments": ""})
    added = ResponseOutputItemAddedEvent(
        type="response.output_item.added", output_index=index, item=empty,
        sequence_number=next(number),
    )  # fmt: skip
    at = {"item_id": item.id, "output_index": index}
    middle = (
        _text_events(item, at, number)
        if isinstance(item, ResponseOutputMessage)
        else _call_events(item, at, number)
    )
    done = ResponseOutputItemDoneEvent(
        type="response.output_item.done", output_index=index, item=item,
        sequence_number=next(number),
    )  # fmt: skip
    return [added, *middle, done]


def _text_events(
    item: ResponseOutputMessage, at: dict[str, Any], number: Iterator[int]
) -> list[ResponseStreamEvent]:
    [part] = item.content
    assert isinstance(part, ResponseOutputText)
    blank = ResponseOutputText(type="output_text", text="", annotations=[])
    return [
        ResponseContentPartAddedEvent(
            type="response.content_part.added", **at, content_index=0, part=blank,
            sequence_number=next(number),
        ),
        ResponseTextDeltaEvent(
            type="response.output_text.delta", **at, content_index=0, delta=part.text,
            logprobs=[], sequence_number=next(number),
        ),
        ResponseTextDoneEvent(
            type="response.output_text.done", **at, content_index=0, text=part.text,
            logprobs=[], sequence_number=next(number),
        ),
        ResponseContentPartDoneEvent(
            type="response.content_part.done", **at, content_index=0, part=part,
            sequence_number=next(number),
        ),
    ]  # fmt: skip


def _call_events(
    item: ResponseFunctionToolCall, at: dict[str, Any], number: Iterator[int]
) -> list[ResponseStreamEvent]:
    return [
        ResponseFunctionCallArgumentsDeltaEvent(
            type="response.function_call_arguments.delta", **at, delta=item.arguments,
            sequence_number=next(number),
        ),
        ResponseFunctionCallArgumentsDoneEvent(
            type="response.function_call_arguments.done", **at, arguments=item.arguments,
            name=item.name, sequence_number=next(number),
        ),
    ]  # fmt: skip


def sse(events: Iterable[ResponseStreamEvent]) -> Iterator[str]:
    """Each event as ``event: <type>`` and its ``data:`` (the whole answer in the last)."""
    for event in events:
        data = event.model_dump_json(exclude_none=True, serialize_as_any=True)
        yield f"event: {event.type}\ndata: {data}\n\n"
