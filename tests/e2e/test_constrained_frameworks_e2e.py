"""What frameworks send by default, against ``rollgym serve`` (vLLM engine, Docker sandboxes):
LangChain's ``bind_tools(tools, tool_choice="any")`` and ``with_structured_output`` (both
methods), pydantic-ai's ``output_type=<model>``, each in a session group on Compute whose
episodes then train one GRPO step.

The constrained turns are sampled as any turn (server/conversation/constraints.py), so what
is checked is what a user relies on: the forced call comes back as a tool call the env runs
and answers, the structured output is a validated pydantic object, and the trained
trajectories hold those turns token for token. ``Answer``'s pattern makes the JSON answer
one the env judges (it reads ``<answer>...</answer>`` wherever it is in the text); a call
of ``Answer`` (function_calling) or of pydantic-ai's ``final_result`` is a tool the env does
not offer (an action error), and the model is never shown those tools in a session: their
schemas reach it only as the constraint (a forced call's arguments follow its schema).
"""

from __future__ import annotations

import asyncio

import pydantic_ai
from pydantic import BaseModel, Field
from test_agent_framework_e2e import model_spans, train_one_step
from test_frameworks_e2e import AGENT_KEY, COMPUTE, GROUP_SIZE, server  # noqa: F401 (fixture)

from rollgym.contract.wire import SessionClosed
from rollgym.envs.compute import PYTHON_TOOL
from rollgym.frameworks import langchain
from rollgym.frameworks import pydantic_ai as on_pydantic_ai
from rollgym.frameworks.session import AgentSession
from rollgym.run.server_process import ServerProcess
from rollgym.server.conversation.codec import ChatCodec
from rollgym.server.conversation.toolcalls import parse_tool_calls

SETTINGS = {"temperature": 0.5, "max_tokens": 96}
METHODS = ("json_schema", "function_calling")  # member i's with_structured_output method


class Answer(BaseModel):
    """The final answer to the question."""

    answer: str = Field(pattern=r"<answer>-?[0-9]{1,16}</answer>")


class Number(BaseModel):
    """The final answer to the question."""

    # bounded: unbounded, the small model may write digits until max_tokens cuts the call
    answer: int = Field(ge=-(10**15), le=10**15)


async def play_langchain(session: AgentSession, i: int) -> BaseModel:
    """A forced python call, answered by the env; then the answer as ``Answer`` by
    ``METHODS[i % 2]``, stepped as the model's action; the structured output."""
    tools = langchain.structured_tools(session)
    forced = langchain.chat_model(session, **SETTINGS).bind_tools(tools, tool_choice="any")
    messages: list = session.messages
    said = await forced.ainvoke(messages)
    # one call or more ("required"), parsed into LangChain's tool calls
    assert said.tool_calls and {call["name"] for call in said.tool_calls} == {PYTHON_TOOL.name}
    assert all(isinstance(call["args"]["code"], str) for call in said.tool_calls)
    answered = [await tools[0].ainvoke(call) for call in said.tool_calls]  # run in the box
    assert [a.tool_call_id for a in answered] == [call["id"] for call in said.tool_calls]
    messages += [said, *answered]
    method = METHODS[i % 2]
    structured = langchain.chat_model(session, **SETTINGS).with_structured_output(
        Answer, method=method, include_raw=True
    )
    written = await structured.ainvoke(messages)
    output = written["parsed"]
    assert isinstance(output, Answer), written
    await session.step()  # the answer as the model wrote it: JSON text, or a call
    return output


async def play_pydantic_ai(session: AgentSession, i: int) -> BaseModel:
    """One run of an agent whose output is ``Number`` (pydantic-ai's output tool, forced
    with ``tool_choice: "required"``), its answer stepped as the model's action."""
    system, user = session.messages
    agent = pydantic_ai.Agent(
        on_pydantic_ai.chat_model(session),
        system_prompt=system["content"],
        output_type=Number,
        model_settings=SETTINGS,
        # A reply sampled at 0.5 may give two calls and run out of tokens in the second,
        # which pydantic-ai refuses and asks again (once by default; twice in a row failed
        # a make test run): as a user would, allow it three tries.
        retries=3,
    )
    result = await agent.run(user["content"])
    assert isinstance(result.output, Number)
    await session.step()
    return result.output


async def play_group(url: str, play, seed: int) -> list[tuple[SessionClosed, BaseModel]]:
    async def member(i: int) -> tuple[SessionClosed, BaseModel]:
        session = await AgentSession.open(url, AGENT_KEY, COMPUTE, seed=seed, group_size=GROUP_SIZE)
        async with session:
            output = await play(session, i)
        assert session.closed is not None
        return session.closed, output

    return list(await asyncio.gather(*(member(i) for i in range(GROUP_SIZE))))


def play_and_train(process: ServerProcess, play, seed: int, model_dir, tmp_path):
    """A group of ``play`` (each member's closed session and its output), every member valid,
    then one GRPO step that trains the group; its trained trajectories by id."""
    played = asyncio.run(play_group(process.url, play, seed=seed))
    closed = [c for c, _ in played]
    assert all(c.valid for c in closed), closed
    [group_id] = {c.group_id for c in closed}
    trained = train_one_step(process, model_dir, tmp_path / "run", GROUP_SIZE)
    assert group_id in trained
    return played, {t.id: t for t in trained[group_id]}


def test_langchain_forced_calls_and_structured_output_train(
    server,  # noqa: F811
    tool_model_dir,
    tmp_path,
) -> None:
    played, by_id = play_and_train(server, play_langchain, 3, tool_model_dir, tmp_path)
    codec = ChatCodec.from_model_dir(tool_model_dir)
    for i, (done, output) in enumerate(played):
        call_span, answer_span = model_spans(by_id[done.trajectory_id])
        calls = parse_tool_calls(codec.decode(call_span), {PYTHON_TOOL.name}).calls
        assert calls and {call.name for call in calls} == {PYTHON_TOOL.name}  # the forced turn
        answer, trajectory = codec.decode(answer_span), by_id[done.trajectory_id]
        if METHODS[i % 2] == "json_schema":  # the content is the JSON: the env judged it
            assert Answer.model_validate_json(answer) == output
            assert trajectory.terminated
        else:  # a call of the schema's tool, which the env does not offer
            [written] = parse_tool_calls(answer, {"Answer"}).calls
            assert Answer.model_validate_json(written.arguments) == output
            assert not trajectory.terminated


def test_pydantic_ai_output_type_trains(server, tool_model_dir, tmp_path) -> None:  # noqa: F811
    played, by_id = play_and_train(server, play_pydantic_ai, 4, tool_model_dir, tmp_path)
    codec = ChatCodec.from_model_dir(tool_model_dir)
    for done, output in played:
        trajectory = by_id[done.trajectory_id]
        # pydantic-ai asks again after an output that fails validation: its output is the
        # last reply's, whose calls ("required": one or more) give it in the first
        span = model_spans(trajectory)[-1]
        written = parse_tool_calls(codec.decode(span), {"final_result"}).calls
        assert written and Number.model_validate_json(written[0].arguments) == output
        assert not trajectory.terminated  # a tool the env does not offer: no answer to it
