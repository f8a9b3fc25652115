"""The doctor's checks on a model's tokenizer and chat template, and on an env's budget.

Each check returns a ``Check``: pass, fail or skip, with the reason in words. These are
pure over a ``ChatCodec`` and plain messages; ``probes`` has the checks that start things
(a sandbox pool, an engine).

* ``template_prefix``: rollgym never re-renders a conversation (``server.conversation.codec``):
  the context of turn k+1 is turn k's prompt, the sampled ids, then the env's reply
  rendered once by template diffing. That is what the model is trained on; a client that
  re-renders the whole conversation each turn (an agent on the OpenAI route, an eval, an
  inference server) must see the same tokens, or the policy is trained on contexts it is
  never served. The check renders a conversation both ways, turn by turn, and compares
  the token ids: a template that rewrites earlier turns (drops reasoning, dates the
  system prompt, numbers the turns) fails here, naming the first token that differs.
  A template that drops an earlier turn's reasoning (``<think>...</think>``, as some
  reasoning models' do) fails on the probe conversation's second turn.
* ``tool_round_trip``: a tool call the template renders (``tool_calls``) must parse back
  to the same call with the envs' parser (``envs.parsing``) and the server's (vLLM's parser
  of the served model's family, the server's ``tool_parser``: ``server.conversation.toolcalls``):
  a model pretrained on its template's format then writes calls both can read. A template that renders no tool call passes (rollgym
  lists the tools and the format in the system message itself).
* ``context_fits``: the opening prompt plus max turns x (max tokens + the env's reply)
  within ``max_model_len`` (``server.rollout.budget``), or episodes are cut by the context.
* ``logprob_agreement``: the largest gap between the server's and the trainer's logprob of
  the same sampled tokens (``probes.logprobs`` computes both), within the tolerance.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any, Literal

from rollgym.envs.toolformats import ToolCallParser
from rollgym.server.conversation.codec import (
    ChatCodec,
    ChatInputError,
    ChatTemplateError,
    TemplateMessage,
)
from rollgym.server.conversation.toolcalls import read_tool_calls
from rollgym.server.rollout.budget import ContextBudget

Status = Literal["pass", "fail", "skip"]


@dataclasses.dataclass(frozen=True)
class Check:
    name: str
    status: Status
    reason: str


@dataclasses.dataclass(frozen=True)
class Turn:
    """One model turn of a conversation: what it wrote, what the env answered."""

    assistant: str
    replies: tuple[TemplateMessage, ...]


PREFIX = "chat template keeps the token prefix"
TOOLS = "tool calls round-trip"
CONTEXT = "context fits max turns x max tokens"
LOGPROBS = "trainer and server logprobs agree"
PROBE_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "python",
        "description": "Run Python code.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string"}},
            "required": ["code"],
        },
    },
}
PROBE_CONVERSATION: tuple[tuple[TemplateMessage, ...], tuple[Turn, ...]] = (
    (
        {"role": "system", "content": "You are a careful agent."},
        {"role": "user", "content": "What is 12 * 34?"},
    ),
    (
        Turn(
            "<think>12 * 34 = 12 * 30 + 12 * 4.</think>Let me compute it.",
            ({"role": "user", "content": "Go on."},),
        ),
        Turn("12 * 34 = 408.", ({"role": "user", "content": "Are you sure? Check it."},)),
        Turn("<answer>408</answer>", ({"role": "user", "content": "Correct."},)),
    ),
)


def template_prefix(
    codec: ChatCodec,
    opening: Sequence[TemplateMessage],
    turns: Sequence[Turn],
    tools: list[dict[str, Any]] | None = None,
) -> Check:
    """Incremental context (as the server builds it) == the whole conversation rendered,
    at every turn; see the module docstring."""
    context = codec.first_prompt(opening, tools=tools)
    messages = list(opening)
    for index, turn in enumerate(turns, start=1):
        context += [*codec.encode(turn.assistant), codec.eos_id]  # as if sampled
        try:
            context += codec.continuation(list(turn.replies), stopped=True)
        except (ChatTemplateError, ChatInputError) as exc:
            return Check(PREFIX, "fail", f"turn {index}: {exc}")
        messages += [{"role": "assistant", "content": turn.assistant}, *turn.replies]
        whole = codec.first_prompt(messages, tools=tools)
        if whole != context:
            at = next(
                (i for i, (a, b) in enumerate(zip(context, whole, strict=False)) if a != b),
                min(len(context), len(whole)),
            )
            served = codec.tokenizer.decode(context[max(at - 4, 0) : at + 4])
            rendered = codec.tokenizer.decode(whole[max(at - 4, 0) : at + 4])
            return Check(
                PREFIX,
                "fail",
                f"turn {index}: token {at} differs: the server's context has {served!r} "
                f"where the whole conversation rendered has {rendered!r} (the template "
                "renders earlier turns differently once the conversation grows)",
            )
    return Check(PREFIX, "pass", f"{len(turns)} turns, {len(context)} tokens, identical both ways")


def tool_round_trip(codec: ChatCodec, tools: list[dict[str, Any]], parser: ToolCallParser) -> Check:
    """The template's rendering of a call to the first tool, parsed back by the envs' parser
    and the server's (``parser``)."""
    from rollgym.envs.errors import ActionError
    from rollgym.envs.parsing import parse_tool_calls
    from rollgym.envs.tools import Tool

    declared = [Tool(**_tool_fields(t)) for t in tools]
    tool = declared[0]
    arguments = {name: _sample(schema) for name, schema in _properties(tool).items()}
    call = {"type": "function", "function": {"name": tool.name, "arguments": arguments}}
    user: list[TemplateMessage] = [{"role": "user", "content": "Use the tool."}]
    before = codec.render(user, tools=tools)
    after = codec.render(
        [*user, {"role": "assistant", "content": "", "tool_calls": [call]}],
        generation_prompt=False,
        tools=tools,
    )
    written = after[len(before) :] if after.startswith(before) else after
    if tool.name not in written:
        return Check(
            TOOLS,
            "pass",
            "the template renders no tool call; rollgym lists the tools and the "
            "<tool_call> format in the system message",
        )
    shown = repr(written.strip()[:160])
    try:
        parsed = parse_tool_calls(written, declared)
    except ActionError as exc:
        return Check(TOOLS, "fail", f"the template writes {shown}; the envs' parser: {exc}")
    if [(c.name, c.arguments) for c in parsed] != [(tool.name, arguments)]:
        return Check(TOOLS, "fail", f"the template writes {shown}; the envs read {parsed}")
    served = read_tool_calls(written, tools, parser).calls
    if [(c.name, json.loads(c.arguments)) for c in served] != [(tool.name, arguments)]:
        return Check(
            TOOLS,
            "fail",
            f"the template writes {shown}; the server ({parser.family} parser) reads {served}",
        )
    return Check(
        TOOLS,
        "pass",
        f"{tool.name}({json.dumps(arguments)}) rendered and parsed back ({parser.family} parser)",
    )


def context_fits(budget: ContextBudget) -> Check:
    if budget.verdict == "fits":
        return Check(
            CONTEXT,
            "pass",
            f"{budget.needed} of {budget.max_model_len} tokens (prompt {budget.prompt}, "
            f"{budget.max_turns} turns of {budget.max_tokens} + ~{budget.env_tokens})",
        )
    return Check(CONTEXT, "fail", budget.explain())


def logprob_agreement(
    served: Sequence[float], trained: Sequence[float], *, prompts: int, tolerance: float
) -> Check:
    """The server's logprobs of sampled tokens against the trainer's of the same tokens.

    >>> logprob_agreement([-1.0, -2.0], [-1.0, -2.5], prompts=1, tolerance=0.02).status
    'fail'
    """
    gaps = [abs(a - b) for a, b in zip(served, trained, strict=True)]
    if not gaps:
        return Check(LOGPROBS, "fail", "the server sampled no token on the probe prompts")
    worst, mean = max(gaps), sum(gaps) / len(gaps)
    reason = (
        f"{len(gaps)} tokens on {prompts} prompts: largest |difference| {worst:.2g}, "
        f"mean {mean:.2g} (tolerance {tolerance:g})"
    )
    return Check(LOGPROBS, "pass" if worst <= tolerance else "fail", reason)


def _tool_fields(tool: dict[str, Any]) -> dict[str, Any]:
    function = tool.get("function", {})
    return {
        "name": function.get("name", ""),
        "description": str(function.get("description", "")),
        "parameters": function.get("parameters") or {"type": "object"},
    }


def _properties(tool: Any) -> dict[str, Any]:
    return dict(tool.parameters.get("properties") or {})


def _sample(schema: Any) -> Any:
    """A valid value for a JSON Schema property (the common types)."""
    if not isinstance(schema, dict):
        return "print(1 + 1)"
    if schema.get("enum"):
        return schema["enum"][0]
    samples = {"integer": 3, "number": 1.5, "boolean": True, "array": [], "object": {}}
    return samples.get(str(schema.get("type")), "print(1 + 1)")
